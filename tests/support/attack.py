"""Tools for attacking the HTTPS port of a real server, its limits set small so each attack takes seconds."""

from __future__ import annotations

import contextlib
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.support.process import post_head, read_response
from tests.support.reviews import fixture
from tests.support.server import RunningServer, running_server
from tls_injector.settings import Limits

# Small on purpose: an attack on a 5 s deadline would take 5 s per test.
SMALL = Limits(max_head_bytes=8 * 1024, max_headers=50, max_body_bytes=512 * 1024, handshake_seconds=0.5,
               head_seconds=0.5, body_seconds=0.8, idle_seconds=1.5, max_connections=64,
               max_connections_per_source=24, linger_seconds=0.3)
REVIEW = fixture("synthetic/pod-create-from-replicaset.json")
# The probes' timeoutSeconds in manifests/base/deployment.yaml.
PROBE_TIMEOUT_SECONDS = 2.0


@contextlib.contextmanager
def small_server(tmp_path: Path, limits: Limits = SMALL) -> Iterator[RunningServer]:
    with running_server(tmp_path, limits=limits, probes=True) as server:
        yield server


def tls_connect(server: RunningServer, timeout: float = 5, *, source: str = "127.0.0.1") -> ssl.SSLSocket:
    """A verified TLS connection from `source`: any 127.x.y.z address is this machine's loopback, so each
    is a client address of its own to the server."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=timeout, source_address=(source, 0))
    return server.client_context().wrap_socket(raw, server_hostname="localhost")


def mutate_once(tls: ssl.SSLSocket) -> int:
    body = httpx.Request("POST", "/", json=REVIEW).read()
    tls.sendall(post_head("/mutate?timeout=10s", len(body)) + body)
    return read_response(tls)[0]


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the peer closes (EOF or reset), or None when still open after `seconds`;
    whatever the server says first (a 408) is read and dropped."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except (ssl.SSLError, ConnectionError):
        pass
    except TimeoutError:
        return None
    return time.monotonic() - started


class ProbeWatch:
    """GET /healthz on the probe listener every 50 ms while an attack runs; records each latency."""

    def __init__(self, server: RunningServer) -> None:
        self.url = server.probe_url + "/healthz"
        self.latencies: list[float] = []
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ProbeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    self.statuses.append(client.get(self.url).status_code)
                except httpx.HTTPError:
                    self.statuses.append(0)
                self.latencies.append(time.monotonic() - started)
                time.sleep(0.05)

    def assert_healthy(self) -> None:
        """Healthy as the kubelet judges it with the probes of manifests/base/deployment.yaml: it acts
        only after `failureThreshold` (2 for readiness, the stricter) probes in a row fail or outlast
        `timeoutSeconds` (2 s). One slow probe is what a loaded machine does to any process (1.2 s
        seen with three CPU burners on two cores); it is not what this watch is for."""
        assert self.statuses, "no probe ran"
        assert set(self.statuses) == {200}, self.statuses
        slow = [latency > PROBE_TIMEOUT_SECONDS for latency in self.latencies]
        assert not any(a and b for a, b in itertools.pairwise(slow)), \
            f"two probes in a row took over {PROBE_TIMEOUT_SECONDS} s: {sorted(self.latencies)[-3:]}"


def closed(server: RunningServer, reason: str) -> float:
    """How many connections the server has closed for `reason`, from its metrics."""
    value = server.metrics.registry.get_sample_value("tls_injector_http_connections_closed_total", {"reason": reason})
    return value or 0.0


def cpu_seconds(work: Callable[[], object]) -> float:
    started = time.thread_time()
    work()
    return time.thread_time() - started


def thread_cpu_clock(thread: threading.Thread) -> Callable[[], float]:
    """The CPU seconds `thread` has run, readable from any other thread (Linux's per-thread clocks)."""
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    return lambda: time.clock_gettime(clock)
