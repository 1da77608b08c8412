"""Clients that queue requests and never read the answers, against a real `serve` process (the memory
tests of tests/hostile and `python -m bench.unread`): the server's RSS and its probes while they do."""

from __future__ import annotations

import functools
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tests.support.attack import REVIEW
from tests.support.process import ServeProcess, post_head

METRICS = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"  # the smallest request: the most per byte read
PROBE_TIMEOUT_SECONDS = 2.0  # the probes' timeoutSeconds in manifests/base/deployment.yaml


def review_request() -> bytes:
    body = httpx.Request("POST", "/", json=REVIEW).read()
    return post_head("/mutate", len(body)) + body


@dataclass
class Outcome:
    rss_before: int = 0
    rss_peak: int = 0
    probes: list[float | None] = field(default_factory=list)  # seconds, None when not answered in time
    sent: int = 0  # bytes the attack got written
    connected: int = 0  # connections opened, reconnections included
    refused: int = 0  # connections that could not be opened
    stopped_by_cap: bool = False

    @property
    def growth(self) -> int:
        return self.rss_peak - self.rss_before

    def unanswered_in_a_row(self) -> int:
        """The longest run of probes not answered in time: the kubelet acts on `failureThreshold` in a row."""
        longest = run = 0
        for latency in self.probes:
            run = run + 1 if latency is None else 0
            longest = max(longest, run)
        return longest

    def summary(self, label: str) -> str:
        late = sum(1 for p in self.probes if p is None)
        answered = [p for p in self.probes if p is not None]
        worst = max(answered, default=0.0)
        return (f"{label}: {self.connected} connections ({self.refused} refused), "
                f"{self.sent / 2**20:.0f} MiB of requests written; "
                f"server RSS {self.rss_before / 2**20:.0f} MiB before, peak {self.rss_peak / 2**20:.0f} MiB"
                f"{' (attack stopped at the cap)' if self.stopped_by_cap else ''}; probes: "
                f"{len(answered)} answered within {PROBE_TIMEOUT_SECONDS:.0f} s (slowest {worst:.2f} s), "
                f"{late} not")


def flood(connect: Callable[[], socket.socket], chunk: bytes, stop: threading.Event, outcome: Outcome) -> None:
    """Write `chunk` over and over, never reading, until told to stop; connect again when closed."""
    while not stop.is_set():
        try:
            sock = connect()
        except OSError:
            outcome.refused += 1
            time.sleep(0.05)
            continue
        outcome.connected += 1
        with sock:
            _write_until_closed(sock, chunk, stop, outcome)


def _write_until_closed(sock: socket.socket, chunk: bytes, stop: threading.Event, outcome: Outcome) -> None:
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            sock.sendall(chunk)
        except (TimeoutError, ssl.SSLWantWriteError):
            continue  # the server stopped reading: its buffers and ours are full
        except (OSError, ssl.SSLError):
            return  # closed by the server
        outcome.sent += len(chunk)


def small_window(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection whose receive buffer is as small as the kernel allows: the answers it never reads then
    fill the kernel's buffers within a few of them, and what the server holds beyond them is in its own
    memory, which is what is measured (loopback otherwise buffers megabytes per connection)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def probe(url: str) -> float | None:
    started = time.monotonic()
    try:
        ok = httpx.get(url, timeout=PROBE_TIMEOUT_SECONDS).status_code == 200
    except httpx.HTTPError:
        return None
    return time.monotonic() - started if ok else None


def attack(server: ServeProcess, probe_port: int, *, target: str, connections: int, seconds: float,
           growth_cap: int, requests: bytes = b"", sources: int = 1) -> Outcome:
    """`connections` clients flooding `target` ("operator": the probe port; "admission") for `seconds`, or
    until the server's RSS has grown by `growth_cap` bytes; /healthz on the probe port every 0.25 s.
    `requests`: what each connection writes over and over (default: pipelined `GET /metrics` to the operator
    port, eight reviews to the admission port). `sources` > 1: the connections come from that many loopback
    addresses (127.0.0.2 onwards), round robin, as from several pods."""
    if target == "operator":
        def connect(source: str) -> socket.socket:
            return small_window(probe_port, source)
        chunk = requests or METRICS * 256
    else:
        def connect(source: str) -> socket.socket:
            return server.client_context().wrap_socket(small_window(server.port, source),
                                                       server_hostname="localhost")
        chunk = requests or review_request() * 8
    outcome = Outcome(rss_before=server.rss_bytes())
    stop = threading.Event()
    addresses = ["127.0.0.1"] if sources == 1 else [f"127.0.0.{2 + n}" for n in range(sources)]
    threads = [threading.Thread(target=flood, args=(functools.partial(connect, addresses[n % len(addresses)]),
                                                    chunk, stop, outcome), daemon=True)
               for n in range(connections)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    url = f"http://127.0.0.1:{probe_port}/healthz"
    try:
        while time.monotonic() < deadline:
            outcome.rss_peak = max(outcome.rss_peak, server.rss_bytes())
            if outcome.growth > growth_cap:
                outcome.stopped_by_cap = True
                break
            outcome.probes.append(probe(url))
            outcome.rss_peak = max(outcome.rss_peak, server.rss_bytes())
            time.sleep(0.25)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
    return outcome
