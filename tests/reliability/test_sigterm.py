"""SIGTERM while requests flow, against the real `python -m tls_injector serve` process.

What the kube-apiserver needs from a terminating webhook pod: the request it is sending completes, a new
connection is refused (so its client tries another endpoint) rather than accepted and dropped, and the
connections it keeps alive are closed, because it reuses them to reach terminating pods.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import threading
import time
from pathlib import Path

from tests.support.certs import write_serving_pair
from tests.support.process import ServeProcess, post_head, read_response, serve_process
from tests.support.reviews import fixture


def large_review() -> bytes:
    """A valid Pod review of ~1 MiB (a big annotation): slow enough to be caught half-sent."""
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["object"]["metadata"]["annotations"]["example.com/blob"] = "x" * (1 << 20)
    return json.dumps(sent).encode()


def closed_by_server(tls: ssl.SSLSocket, *, within: float) -> bool:
    """True when the server closes this idle connection (EOF or reset) within `within` seconds."""
    tls.settimeout(within)
    try:
        return tls.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True
    except TimeoutError:
        return False


def refused_within(server: ServeProcess, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        time.sleep(0.02)
    return False


class Load:
    """Reviews sent back to back on one kept-alive connection per worker, reconnecting after a close."""

    def __init__(self, server: ServeProcess, body: bytes, workers: int = 4) -> None:
        self.server, self.body = server, body
        self.statuses: list[int] = []
        self.connection_errors = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._work) for _ in range(workers)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)

    def _work(self) -> None:
        while not self.stop.is_set():
            try:
                with self.server.connect(timeout=5) as tls:
                    while not self.stop.is_set():
                        tls.sendall(post_head("/mutate", len(self.body)) + self.body)
                        self.statuses.append(read_response(tls)[0])
            except OSError:  # refused, reset or closed by the server: what a client sees at shutdown
                self.connection_errors += 1
                time.sleep(0.01)


def test_sigterm_finishes_in_flight_requests_refuses_new_ones_and_closes_idle_connections(tmp_path: Path) -> None:
    small = json.dumps(fixture("synthetic/pod-create-from-replicaset.json")).encode()
    big = large_review()
    files = write_serving_pair(tmp_path / "pair")
    with serve_process(tmp_path, files, "--log-level", "warning", "--drain-seconds", "10") as server, \
            Load(server, small) as load, server.connect() as idle, server.connect() as in_flight:
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_response(idle)[0] == 200
        in_flight.sendall(post_head("/mutate", len(big)) + big[: len(big) // 2])
        time.sleep(0.3)  # the load is flowing and the server has started reading the big request
        served_before = len(load.statuses)
        server.process.send_signal(signal.SIGTERM)

        # the drain closes a connection idle for 2 s (DRAIN_IDLE_SECONDS); 5 s leaves room for a loaded machine
        assert closed_by_server(idle, within=5), "a kept-alive idle connection stayed open after SIGTERM"
        assert refused_within(server, 3), "new connections were still accepted after SIGTERM"
        assert server.process.poll() is None, "the server exited with a request still in flight"
        in_flight.sendall(big[len(big) // 2:])
        status, body = read_response(in_flight)
        assert status == 200
        assert json.loads(body)["response"]["uid"] == json.loads(big)["request"]["uid"]
        assert server.process.wait(timeout=15) == 0
    assert served_before > 0
    assert set(load.statuses) == {200}, "every answer given during shutdown is a complete 200"
    assert "Traceback" not in server.stderr()
