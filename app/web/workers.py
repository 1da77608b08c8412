"""`serve --workers N`: N worker processes answer on one listening socket; a supervisor keeps them running.

One Python process uses one core (the interpreter runs one thread at a time), so a pod given N cores
runs N workers. The supervisor binds the admission port once and hands the socket to every worker (the
same file descriptor, inherited): each worker accepts from the one queue, so a worker that dies loses no
connection waiting in it — with a socket per worker (SO_REUSEPORT) the kernel would reset the connections
queued on the dead worker's socket, and the apiserver would see failed calls. Each worker is the whole
single-process server (`WebhookServer`): its own event loop, certificate reload (it polls the files and
takes the supervisor's SIGHUP), limits and drain.

The supervisor:
- starts the workers as fresh interpreters (`python -m tls_injector serve ... --worker-fd FD`), not forks, so no
  thread or lock of its own is copied into them;
- restarts a worker that exits unasked, after a pause that doubles from RESTART_FIRST_SECONDS up to
  RESTART_MAX_SECONDS and starts again once a worker has run for RESTART_RESET_SECONDS; a worker that
  exits with status 2 (it could not start) stops the whole server with status 2, since its siblings
  would fail the same way;
- passes SIGHUP on; on SIGTERM/SIGINT closes its copy of the socket, passes the signal on (each worker
  drains as a single server does) and exits 0 once all are gone, killing any still there after the
  drain period plus KILL_MARGIN_SECONDS;
- serves the probe port itself (the workers open none), from what each worker writes to its state file
  every tick: /healthz fails when a worker is missing or its event loop has not beaten for
  STALL_SECONDS, /readyz is ready while the supervisor is not draining and at least one worker is ready,
  and /metrics sums every worker's metrics (tls_injector.web.metrics).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import multiprocess

from tls_injector.web.health import STALL_SECONDS, Health, Plain, Probes, listen, plain_routes
from tls_injector.web.metrics import MULTIPROCESS_ENV, render_shared

if TYPE_CHECKING:
    from tls_injector.web.operator import OperatorPort

log = logging.getLogger("tls_injector.workers")

# The kernel's accept queue, as for a single server (tls_injector.web.server).
BACKLOG = 1024
RESTART_FIRST_SECONDS, RESTART_MAX_SECONDS, RESTART_RESET_SECONDS = 0.5, 16.0, 60.0
# After SIGTERM each worker drains for up to --drain-seconds; this much more and it is killed.
KILL_MARGIN_SECONDS = 5.0
# How often the supervisor looks at its workers; a dead one is noticed within this.
WATCH_SECONDS = 0.2
EXIT_CANNOT_START = 2


class WorkerSlot:
    """A worker's side: the socket the supervisor handed over, and the state file it reads."""

    def __init__(self, fd: int, state_file: Path, supervisor: int) -> None:
        # The supervisor's pid comes on the command line: read from getppid() once the worker is up, it
        # would already be init's if the supervisor died while the worker was starting.
        self.fd, self.state_file, self.supervisor = fd, state_file, supervisor

    def listening_socket(self) -> socket.socket:
        sock = socket.socket(fileno=self.fd)
        sock.setblocking(False)
        return sock

    def orphaned(self) -> bool:
        """The supervisor is gone (killed outright, say by the OOM killer): the worker must not serve on
        alone, unsupervised and unscraped; it drains and exits instead."""
        return os.getppid() != self.supervisor

    def beat(self, health: Health) -> None:
        """Called every tick of the event loop (at least once a second)."""
        state = {"pid": os.getpid(), "beat": time.time(), "ready": health.ready}
        partial = self.state_file.with_suffix(".tmp")
        with contextlib.suppress(OSError):  # the supervisor is gone or its directory removed: nothing to tell
            partial.write_bytes(orjson.dumps(state))
            partial.replace(self.state_file)


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float = 0.0
    pause: float = RESTART_FIRST_SECONDS


class Supervisor:
    def __init__(self, *, count: int, host: str, port: int, probe_port: int | None, drain_seconds: float,
                 worker_argv: Callable[[int, int, Path], list[str]]) -> None:
        self.count, self.host, self.port, self.probe_port = count, host, port, probe_port
        self.drain_seconds, self.worker_argv = drain_seconds, worker_argv
        self.state_dir = self.metrics_dir = Path()
        self.workers = [_Worker(index) for index in range(count)]
        self.stopping = False
        self._wake = threading.Event()
        self._hangup = False
        self.sock: socket.socket | None = None
        self.probe_sock: socket.socket | None = None
        self.probes: OperatorPort | None = None

    def bind(self) -> None:
        """Listen on the admission port (and the probe port); OSError when either cannot be had."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET  # an IPv6 address, as for one server
        self.sock = socket.create_server((self.host, self.port), family=family, backlog=BACKLOG)
        self.sock.set_inheritable(True)
        if self.probe_port is not None:
            try:
                self.probe_sock = listen(self.host, self.probe_port)
            except OSError:
                self.close()
                raise

    def make_state_dir(self) -> None:
        """The workers' state and metrics files, in a directory of their own; OSError when it cannot be made."""
        try:
            self.state_dir = Path(tempfile.mkdtemp(prefix="tls-injector-workers-"))
        except OSError:
            self.close()
            raise
        self.metrics_dir = self.state_dir / "metrics"
        self.metrics_dir.mkdir()

    def close(self) -> None:
        """Give back what bind() and make_state_dir() took (run() does this itself when it ends)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.probe_sock is not None:
            self.probe_sock.close()
            self.probe_sock = None

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (then 0) or until a worker cannot start (then 2)."""
        assert self.sock is not None, "bind() first"
        assert self.state_dir != Path(), "make_state_dir() first"
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hangup)
        try:
            for worker in self.workers:
                self._start(worker)
            self._serve_probes()
            code = self._watch()
        finally:
            self._stop_all()
            if self.probes is not None:
                self.probes.stop()
            elif self.probe_sock is not None:
                self.probe_sock.close()
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return code

    def _serve_probes(self) -> None:
        """The probe port, once the workers are starting: a probe that connects meanwhile waits in the
        socket's queue. FastAPI and uvicorn are imported here, not at the top, since every worker imports
        this module (WorkerSlot) and they cost a second or more of CPU, which the supervisor now spends
        while its workers start rather than before."""
        if self.probe_sock is None:
            return
        from tls_injector.web.operator import OperatorPort, create_app  # noqa: PLC0415

        self.probes = OperatorPort(self.probe_sock, create_app(self.routes()))
        self.probes.start()

    def _watch(self) -> int:
        while not self.stopping:
            self._wake.wait(WATCH_SECONDS)
            self._wake.clear()
            if self._hangup:
                self._hangup = False
                log.info("SIGHUP: passed on to every worker that is up")
                self._hang_up_running()
            now = time.monotonic()
            for worker in self.workers:
                code = self._check(worker, now)
                if code is not None:
                    return code
        return 0

    def _check(self, worker: _Worker, now: float) -> int | None:
        process = worker.process
        if process is None:
            if not self.stopping and now >= worker.restart_at:
                self._start(worker)
            return None
        status = process.poll()
        if status is None:
            return None
        multiprocess.mark_process_dead(process.pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
        worker.process = None
        ran = now - worker.started
        if status == EXIT_CANNOT_START:
            log.error("a worker could not start; stopping (its error is above)", extra={"worker": worker.index})
            return EXIT_CANNOT_START
        worker.pause = RESTART_FIRST_SECONDS if ran >= RESTART_RESET_SECONDS else worker.pause
        log.warning("a worker exited; restarting it", extra={
            "worker": worker.index, "pid": process.pid, "status": _describe(status), "ran_seconds": round(ran, 1),
            "restart_in_seconds": worker.pause})
        worker.restart_at = now + worker.pause
        worker.pause = min(RESTART_MAX_SECONDS, worker.pause * 2)
        return None

    def _start(self, worker: _Worker) -> None:
        assert self.sock is not None
        fd = self.sock.fileno()
        state_file = self.state_dir / f"worker-{worker.index}.json"
        state_file.unlink(missing_ok=True)
        env = {**os.environ, MULTIPROCESS_ENV: str(self.metrics_dir)}
        argv = self.worker_argv(worker.index, fd, state_file)  # this program, with the flags it was given
        worker.started = time.monotonic()
        try:
            worker.process = subprocess.Popen(argv, pass_fds=(fd,), env=env)  # noqa: S603
        except OSError as error:  # no process to be had now (a pid or memory limit): try again later
            log.error("a worker could not be started; trying again", extra={
                "worker": worker.index, "error": str(error), "restart_in_seconds": worker.pause})
            worker.restart_at = worker.started + worker.pause
            worker.pause = min(RESTART_MAX_SECONDS, worker.pause * 2)
            return
        log.info("worker started", extra={"worker": worker.index, "pid": worker.process.pid})

    def _stop_all(self) -> None:
        self.stopping = True
        if self.sock is not None:
            self.sock.close()  # with every worker's copy closed as it drains, new connections are refused
            self.sock = None
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.drain_seconds + KILL_MARGIN_SECONDS
        for worker in self.workers:
            if worker.process is None:
                continue
            try:
                worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("a worker did not stop in time; killed", extra={"worker": worker.index})
                worker.process.kill()
                worker.process.wait()

    def _hang_up_running(self) -> None:
        """SIGHUP to the workers whose event loop has beaten. One still starting has no handler for it yet
        (the default would end it), and it reads the certificate files as it starts anyway."""
        up = {state["pid"] for state in self.states() if state["beat_age"] is not None}
        for worker in self.workers:
            if worker.process is not None and worker.process.pid in up and worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGHUP)

    def _signal_all(self, signum: int) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signum)

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
        self._wake.set()

    def _on_hangup(self, signum: int, frame: Any) -> None:
        self._hangup = True
        self._wake.set()

    # the probe port

    def states(self) -> list[dict[str, Any]]:
        """What each worker last wrote, with how long ago its loop beat (None: nothing written yet)."""
        now, found = time.time(), []
        for worker in self.workers:
            process = worker.process
            state: dict[str, Any] = {"worker": worker.index, "pid": process.pid if process else None}
            try:
                written = orjson.loads((self.state_dir / f"worker-{worker.index}.json").read_bytes())
            except (OSError, orjson.JSONDecodeError):
                written = None
            if written is not None and process is not None and written.get("pid") == process.pid:
                state.update(ready=bool(written.get("ready")), beat_age=round(now - float(written["beat"]), 2))
            else:
                state.update(ready=False, beat_age=None)
            found.append(state)
        return found

    def routes(self) -> dict[bytes, Callable[[], Plain]]:
        """The probe port's routes (tls_injector.web.health), answered from the workers' state files."""
        return plain_routes(Probes(healthy=self._healthy, ready=self._ready,
                                   metrics=lambda: render_shared(self.metrics_dir)))

    def _healthy(self) -> tuple[bool, dict[str, Any]]:
        states = self.states()
        healthy = all(s["beat_age"] is not None and s["beat_age"] <= STALL_SECONDS for s in states)
        return healthy, {"status": "ok" if healthy else "worker down or stalled", "workers": states}

    def _ready(self) -> tuple[bool, dict[str, Any]]:
        states = self.states()
        ready = not self.stopping and any(s["ready"] for s in states)
        return ready, {"ready": ready, "shutting_down": self.stopping, "workers": states}


def worker_count(value: str) -> int:
    """`--workers`: a positive number, or `auto` for the cores this process may run on."""
    if value == "auto":
        return len(os.sched_getaffinity(0))
    count = int(value)
    if count < 1:
        raise ValueError(value)
    return count


def _describe(status: int) -> str:
    if status >= 0:
        return f"exit {status}"
    try:
        return f"signal {signal.Signals(-status).name}"
    except ValueError:  # a real-time signal: only the first and last have names
        return f"signal {-status}"


def strip_flags(argv: Sequence[str], flags: dict[str, int]) -> list[str]:
    """`argv` without the given flags; `flags` says how many values each takes (`--flag=value` handled)."""
    kept: list[str] = []
    skip = 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = 0 if "=" in arg else flags[name]
            continue
        kept.append(arg)
    return kept
