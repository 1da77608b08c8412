"""`serve --workers 2` as real processes: both workers answer, metrics sum them, a killed worker is
replaced, SIGHUP reloads the certificate in each, SIGTERM drains them all and exits 0.

A new connection is sent to one chosen worker by stopping the other (SIGSTOP): a stopped process cannot
accept, so the one listening socket hands the connection to the running worker."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.certs import ServingFiles, write_serving_pair
from tests.support.process import ROOT, free_port, post_head, read_response
from tests.support.reviews import fixture

REVIEW = orjson.dumps(fixture("synthetic/pod-create-from-replicaset.json"))
DRAIN_SECONDS = 3
# A pool's start (up to 45 s, above) and its drain add to each test: past the suite's 60 s default under
# load. This timeout only catches a hang.
pytestmark = pytest.mark.timeout(180)


@dataclass
class Pool:
    process: subprocess.Popen[bytes]
    port: int
    probe_port: int
    files: ServingFiles
    stderr_file: Path

    def probe(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.probe_port}{path}", timeout=5)

    def worker_pids(self) -> list[int]:
        return [w["pid"] for w in self.probe("/readyz").json()["workers"]]

    def connect(self, ca_file: Path | None = None) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        context = ssl.create_default_context(cafile=str(ca_file or self.files.ca_file))
        return context.wrap_socket(raw, server_hostname="localhost")

    def mutate(self, tls: ssl.SSLSocket) -> int:
        tls.sendall(post_head("/mutate", len(REVIEW)) + REVIEW)
        return read_response(tls)[0]

    @contextlib.contextmanager
    def only(self, pid: int) -> Iterator[None]:
        """New connections go to worker `pid`: every other worker is stopped meanwhile."""
        others = [other for other in self.worker_pids() if other != pid]
        for other in others:
            os.kill(other, signal.SIGSTOP)
        try:
            yield
        finally:
            for other in others:
                os.kill(other, signal.SIGCONT)

    def patched_total(self, url: str) -> float:
        text = httpx.get(url, timeout=5, verify=ssl.create_default_context(cafile=str(self.files.ca_file))).text
        found = re.search(r'^tls_injector_admission_requests_total\{endpoint="mutate",outcome="patched"\} (\S+)$',
                          text, re.MULTILINE)
        assert found, text
        return float(found.group(1))

    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace")

    def state_dir(self) -> Path:
        found = re.search(r'"state_dir":"([^"]+)"', self.stderr())
        assert found, self.stderr()
        return Path(found.group(1))


def running(pid: int) -> bool:
    """Still a process, and not one that has exited and waits to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def wait_for(condition: object, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            if condition():  # type: ignore[operator]
                return
        time.sleep(0.05)
    raise TimeoutError(f"not within {seconds} s")


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    files = write_serving_pair(tmp_path / "certs")
    port, probe_port = free_port(), free_port()
    argv = [sys.executable, "-m", "tls_injector", "serve", "--workers", "2", "--no-reconciler", "--host", "127.0.0.1",
            "--port", str(port), "--probe-port", str(probe_port), "--drain-seconds", str(DRAIN_SECONDS),
            "--tls-cert-file", str(files.cert_file), "--tls-private-key-file", str(files.key_file)]
    stderr_file = tmp_path / "pool.stderr"
    with stderr_file.open("wb") as stderr:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    running = Pool(process, port, probe_port, files, stderr_file)
    try:
        # Three interpreters import the app: a few seconds when quiet, past 15 s on a loaded machine. 45 s
        # only catches a pool that never gets ready.
        wait_for(lambda: running.probe("/readyz").status_code == 200
                 and all(w["ready"] for w in running.probe("/readyz").json()["workers"]), seconds=45)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # the orderly end removes the workers' directory
            try:
                process.wait(timeout=DRAIN_SECONDS + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    assert not running.state_dir().exists()


def test_both_workers_answer_and_every_scrape_sums_them(pool: Pool) -> None:
    pids = pool.worker_pids()
    assert len(set(pids)) == 2
    for pid in pids:
        with pool.only(pid), pool.connect() as tls:
            assert [pool.mutate(tls) for _ in range(3)] == [200, 200, 200]
    assert pool.probe("/healthz").status_code == 200
    assert pool.patched_total(f"http://127.0.0.1:{pool.probe_port}/metrics") == 6
    assert pool.patched_total(f"https://localhost:{pool.port}/metrics") == 6  # any worker's scrape: the sum


def test_a_killed_worker_is_replaced_and_what_it_counted_stays_counted(pool: Pool) -> None:
    victim, survivor = pool.worker_pids()
    with pool.only(victim), pool.connect() as tls:
        assert [pool.mutate(tls) for _ in range(3)] == [200, 200, 200]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in pool.worker_pids() and None not in pool.worker_pids()
             and all(w["ready"] for w in pool.probe("/readyz").json()["workers"]))
    replacement = next(pid for pid in pool.worker_pids() if pid != survivor)
    with pool.only(replacement), pool.connect() as tls:
        assert pool.mutate(tls) == 200
    assert pool.patched_total(f"http://127.0.0.1:{pool.probe_port}/metrics") == 4
    assert "a worker exited; restarting it" in pool.stderr()
    assert "signal SIGKILL" in pool.stderr()


def test_sighup_reloads_the_certificate_in_every_worker(pool: Pool, tmp_path: Path) -> None:
    renewed = write_serving_pair(tmp_path / "renewed", common_name="renewed CA")
    shutil.copy(renewed.key_file, pool.files.key_file)
    shutil.copy(renewed.cert_file, pool.files.cert_file)
    pool.process.send_signal(signal.SIGHUP)
    for pid in pool.worker_pids():
        with pool.only(pid):
            wait_for(lambda: _serves(pool, renewed.ca_file), seconds=5)


def _serves(pool: Pool, ca_file: Path) -> bool:
    try:
        with pool.connect(ca_file) as tls:
            return pool.mutate(tls) == 200
    except ssl.SSLCertVerificationError:
        return False


def test_sigterm_finishes_requests_in_flight_in_every_worker_and_exits_zero(pool: Pool) -> None:
    half = len(REVIEW) // 2
    started = []
    for pid in pool.worker_pids():
        with pool.only(pid):
            tls = pool.connect()
            tls.sendall(post_head("/mutate", len(REVIEW)) + REVIEW[:half])
            started.append(tls)
    time.sleep(0.2)  # both heads read before the signal
    pool.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    for tls in started:
        with tls:
            tls.sendall(REVIEW[half:])
            status, _ = read_response(tls)
            assert status == 200
    assert pool.process.wait(timeout=DRAIN_SECONDS + 10) == 0
    with pytest.raises(ConnectionRefusedError):  # every copy of the listening socket is closed
        socket.create_connection(("127.0.0.1", pool.port), timeout=2).close()


def _serve(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    files = write_serving_pair(tmp_path / "certs")
    argv = [sys.executable, "-m", "tls_injector", "serve", "--host", "127.0.0.1", "--tls-cert-file",
            str(files.cert_file), "--tls-private-key-file", str(files.key_file), *extra]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(("extra", "says"), [
    (["--workers", "2"], "needs --no-reconciler"),
    (["--workers", "0", "--no-reconciler"], "expected a number of at least 1"),
    (["--workers", "2", "--no-reconciler", "--rules", "/nonexistent/rules.yaml"], "rules.yaml"),
])
def test_what_no_worker_could_serve_with_is_one_line_and_exit_2(tmp_path: Path, extra: list[str], says: str) -> None:
    done = _serve(tmp_path, "--port", str(free_port()), *extra)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = _serve(tmp_path, "--workers", "2", "--no-reconciler", "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "cannot listen" in done.stderr


def test_workers_left_without_their_supervisor_drain_and_exit(pool: Pool) -> None:
    """Killed outright (as the OOM killer would), the supervisor cannot stop its workers: they notice."""
    pids = pool.worker_pids()
    pool.process.kill()
    pool.process.wait(timeout=10)
    deadline = time.monotonic() + DRAIN_SECONDS + 5
    while time.monotonic() < deadline and any(running(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(running(pid) for pid in pids)
    shutil.rmtree(pool.state_dir())  # nobody else will: its owner was killed
