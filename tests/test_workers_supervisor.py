"""The `serve --workers` supervisor's own decisions, on stand-in worker processes (the whole pool as real
processes is tests/test_serve_workers.py): what it signals, how it reports a death, how it survives a
failed start, and which addresses it listens on."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tls_injector.web.workers import Supervisor, WorkerSlot, _describe

# Dies of SIGHUP, as a worker without a handler would. Its default action set again: an ignored signal stays
# ignored across fork and exec, so under `nohup` (or any parent ignoring SIGHUP) the stand-in would not die.
SLEEPER = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_DFL); time.sleep(60)"]


def sighup_default(pid: int, *, within: float = 10.0) -> None:
    """Wait until the stand-in no longer ignores SIGHUP (bit 0 of SigIgn in /proc/PID/status, proc(5)): one
    sent while it is still starting under an ignoring parent would be discarded."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
        if not ignored & 1 << (signal.SIGHUP - 1):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still ignores SIGHUP after {within} s")


def supervisor(tmp_path: Path, *, argv: list[str] = SLEEPER, host: str = "127.0.0.1") -> Supervisor:
    made = Supervisor(count=2, host=host, port=0, probe_port=None, drain_seconds=1,
                      worker_argv=lambda index, fd, state: argv)
    made.state_dir = made.metrics_dir = tmp_path
    return made


@pytest.fixture
def two(tmp_path: Path) -> Iterator[Supervisor]:
    made = supervisor(tmp_path)
    made.bind()
    for worker in made.workers:
        made._start(worker)
    yield made
    for worker in made.workers:
        if worker.process is not None:
            worker.process.kill()
            worker.process.wait()
    made.close()


def test_sighup_goes_only_to_workers_whose_loop_has_beaten(two: Supervisor, tmp_path: Path) -> None:
    up, starting = (w.process for w in two.workers)
    assert up is not None
    assert starting is not None
    sighup_default(up.pid)  # as a worker's loop beats only once its handler is set
    (tmp_path / "worker-0.json").write_bytes(orjson.dumps({"pid": up.pid, "beat": time.time(), "ready": True}))
    two._hang_up_running()
    assert up.wait(timeout=10) == -signal.SIGHUP
    time.sleep(0.2)
    assert starting.poll() is None  # still starting: left alone, it reads the certificate as it starts


def test_a_worker_that_cannot_be_started_is_tried_again_later(tmp_path: Path) -> None:
    made = supervisor(tmp_path, argv=[str(tmp_path / "no-such-program")])
    made.bind()
    try:
        worker = made.workers[0]
        made._start(worker)
        assert worker.process is None
        assert worker.restart_at > worker.started  # the watch loop starts it again then
        assert worker.pause > 0.5  # and waits longer after each failure
    finally:
        made.close()


@pytest.mark.parametrize(("status", "said"), [(0, "exit 0"), (3, "exit 3"), (-9, "signal SIGKILL"),
                                               (-40, "signal 40")])
def test_every_way_a_worker_ends_can_be_told(status: int, said: str) -> None:
    assert _describe(status) == said


def test_an_ipv6_address_is_listened_on(tmp_path: Path) -> None:
    made = supervisor(tmp_path, host="::1")
    made.bind()
    try:
        assert made.sock is not None
        assert made.sock.getsockname()[0] == "::1"
    finally:
        made.close()


def test_a_worker_knows_it_is_orphaned_by_the_pid_it_was_given(tmp_path: Path) -> None:
    # Given on its command line: read with getppid() once the worker is up, a supervisor that died while
    # the worker was starting would leave init's pid there, and the worker would never notice.
    assert not WorkerSlot(0, tmp_path / "state.json", os.getppid()).orphaned()
    assert WorkerSlot(0, tmp_path / "state.json", os.getppid() + 1).orphaned()
