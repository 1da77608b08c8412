"""The operator port (tls_injector.web.operator): FastAPI on uvicorn in a thread of its own, its connections capped.

A flood of slow clients costs sockets, never threads, and never more sockets than the cap; a probe that
sends its request at once is answered throughout.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tls_injector.web.health import JSON, Probes, listen, plain_routes
from tls_injector.web.operator import OperatorPort, PortLimits, create_app

LIMITS = PortLimits(max_connections=16, request_seconds=0.5, answer_seconds=5.0)


@pytest.fixture
def port() -> Iterator[OperatorPort]:
    healthy = {"ok": True}
    probes = Probes(healthy=lambda: (healthy["ok"], {"status": "ok" if healthy["ok"] else "down"}),
                    ready=lambda: (True, {"ready": True}), metrics=lambda: b"tls_injector_up 1\n")
    served = OperatorPort(listen("127.0.0.1", 0), create_app(plain_routes(probes)), limits=LIMITS)
    served.healthy = healthy  # type: ignore[attr-defined]
    served.start()
    try:
        yield served
    finally:
        served.stop()


def test_the_three_routes_answer_as_their_checks_say_and_anything_else_is_404(port: OperatorPort) -> None:
    base = f"http://127.0.0.1:{port.port}"
    assert httpx.get(base + "/healthz").json() == {"status": "ok"}
    assert httpx.get(base + "/readyz").headers["content-type"] == JSON.decode()
    assert httpx.get(base + "/metrics").text == "tls_injector_up 1\n"
    port.healthy["ok"] = False  # type: ignore[attr-defined]
    down = httpx.get(base + "/healthz")
    assert (down.status_code, orjson.loads(down.content)) == (503, {"status": "down"})
    assert httpx.get(base + "/nothing-here").status_code == 404
    assert httpx.post(base + "/healthz").status_code == 405
    assert "server" not in httpx.get(base + "/healthz").headers  # no version to advertise


def test_a_flood_of_silent_and_trickling_clients_takes_no_thread_and_at_most_the_cap_of_sockets(
    port: OperatorPort,
) -> None:
    threads = threading.active_count()
    flood: list[socket.socket] = []
    try:
        for n in range(300):
            sock = socket.create_connection(("127.0.0.1", port.port), timeout=5)
            if n % 2:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
            flood.append(sock)
        time.sleep(0.2)
        assert len(port.stats.open) <= LIMITS.max_connections
        assert threading.active_count() == threads  # the old thread-per-connection server made 300
        # A probe that sends its request at once is answered while the flood goes on: the oldest idle
        # connection made room for it.
        started = time.monotonic()
        assert httpx.get(f"http://127.0.0.1:{port.port}/healthz", timeout=2).status_code == 200
        assert time.monotonic() - started < 1.0
        # Every connection beyond the cap was closed to make room, or for saying nothing in time.
        assert port.stats.evicted > 0
        assert port.stats.evicted + port.stats.timed_out >= 300 - LIMITS.max_connections
        deadline = time.monotonic() + LIMITS.request_seconds * 3 + 10  # 3 request times quiet; more when loaded
        while port.stats.open:  # nobody sent a whole request: every one is closed
            assert time.monotonic() < deadline, port.stats.open
            time.sleep(0.05)
        assert port.stats.timed_out > 0
        closed = sum(1 for sock in flood if _closed_by_server(sock))
        assert closed == len(flood)
    finally:
        for sock in flood:
            sock.close()


def test_a_kept_alive_client_asking_every_50_ms_is_never_cut_off_between_its_requests(port: OperatorPort) -> None:
    """Four times the request deadline on one connection: the deadline runs from the last answer, so a
    client that keeps asking never meets a close racing its next request."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port.port}") as client:
        started = time.monotonic()
        while time.monotonic() - started < LIMITS.request_seconds * 4:
            assert client.get("/healthz").status_code == 200
            time.sleep(0.05)
    assert port.stats.timed_out == 0


def test_the_port_is_given_back_when_stopped_and_a_taken_port_is_an_oserror() -> None:
    probes = Probes(healthy=lambda: (True, {}), ready=lambda: (True, {}), metrics=lambda: b"")
    first = OperatorPort(listen("127.0.0.1", 0), create_app(plain_routes(probes)))
    with pytest.raises(OSError, match="in use"):
        listen("127.0.0.1", first.port)
    first.start()
    first.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{first.port}/healthz")
    again = OperatorPort(listen("127.0.0.1", first.port), create_app(plain_routes(probes)))
    again.stop()  # never started: still gives the socket back


def test_requests_pipelined_beyond_the_cap_close_the_connection_and_a_few_are_answered_in_order(
    port: OperatorPort,
) -> None:
    """A client that queues requests without reading the answers is closed once more than max_pipelined
    wait behind the one being answered (uvicorn queued every one it read, for ever); one that pipelines
    within the cap gets every answer, in order."""
    with socket.create_connection(("127.0.0.1", port.port), timeout=5) as polite:
        polite.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * (LIMITS.max_pipelined + 1))
        assert _answers(polite, LIMITS.max_pipelined + 1) == [200] * (LIMITS.max_pipelined + 1)
    with socket.create_connection(("127.0.0.1", port.port), timeout=5) as greedy:
        greedy.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 256)
        assert _closed_by_server(greedy)
    assert port.stats.overflowed == 1
    assert httpx.get(f"http://127.0.0.1:{port.port}/healthz").status_code == 200


def test_a_head_over_its_limit_is_431_and_closed(port: OperatorPort) -> None:
    with socket.create_connection(("127.0.0.1", port.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (LIMITS.max_head_bytes + 1))
        assert sock.recv(4096).startswith(b"HTTP/1.1 431 ")
        assert _closed_by_server(sock)
    with socket.create_connection(("127.0.0.1", port.port), timeout=5) as sock:  # at the limit: served
        field = b"X-Big: " + b"a" * (LIMITS.max_head_bytes - 200) + b"\r\n"
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + field + b"\r\n")
        assert _answers(sock, 1) == [200]
    assert port.stats.overflowed == 1


def test_a_table_full_of_clients_that_do_not_read_their_answers_still_lets_a_probe_in() -> None:
    """Every slot holds a connection whose answers wait unread (neither idle nor closing on its own for
    answer_seconds): a probe takes the slot of the one stalled longest, where before it was refused."""
    big = Probes(healthy=lambda: (True, {}), ready=lambda: (True, {}), metrics=lambda: b"#" * 200_000)
    limits = PortLimits(max_connections=4, request_seconds=5.0, answer_seconds=30.0)
    served = OperatorPort(listen("127.0.0.1", 0), create_app(plain_routes(big)), limits=limits)
    served.start()
    stalled: list[socket.socket] = []
    try:
        for _ in range(limits.max_connections):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", served.port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # 200 KB it never reads
            stalled.append(sock)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(c.stalled() for c in served.stats.open) < len(stalled):
            time.sleep(0.02)
        assert sum(c.stalled() for c in served.stats.open) == limits.max_connections
        assert httpx.get(f"http://127.0.0.1:{served.port}/healthz", timeout=2).status_code == 200
        assert (served.stats.evicted, served.stats.refused) == (1, 0)
    finally:
        for sock in stalled:
            sock.close()
        served.stop()


def _answers(sock: socket.socket, count: int) -> list[int]:
    """The statuses of `count` answers with a content-length, read in order."""
    data, statuses = b"", []
    while len(statuses) < count:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {statuses}"
            data += chunk
            continue
        head = data[:end].split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in head if line.lower().startswith(b"content-length:"))
        if len(data) < end + 4 + length:
            data += sock.recv(65536)
            continue
        statuses.append(int(head[0].split()[1]))
        data = data[end + 4 + length:]
    return statuses


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        while sock.recv(4096):  # an answer (a 408 or 503) may come before the close
            pass
    except ConnectionResetError:  # closed with the trickled head unread: the kernel resets
        return True
    except TimeoutError:
        return False
    return True
