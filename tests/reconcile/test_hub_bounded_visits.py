"""A member's API server is not the hub's to trust (docs/multicluster.md, "What a member can do"): one
that answers one byte at a time, or inflates its answers, or sends huge ones, costs the hub one bounded
visit of that member and nothing else. Stand-in servers on loopback play the hostile member; every one of
them is bounded in time (it stops trickling after TRICKLE_FOR seconds) and in bytes."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime

import pytest

from tests.kubeapi import running_emulator
from tests.reconcile.cluster import OWN_NS, namespace
from tests.reconcile.test_hub_members import INTERMEDIATES, register
from tests.test_member_cluster_access import kubeconfig
from tls_injector.kube import SECRETS, AnswerRefused, KubeApi, Unavailable, member_api
from tls_injector.reconcile.federation import hub
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

# How long a trickling stand-in keeps a connection going: far past any deadline below, so a client that
# waits for the end of the answer is caught by the elapsed time (on a hub without a deadline, 40 s).
TRICKLE_FOR = 40.0
DEADLINE = 1.5


Answer = Callable[[socket.socket, threading.Event], None]


@contextmanager
def stand_in(answer: Answer) -> Iterator[str]:
    """A loopback server that reads each request's head and runs `answer` on the connection; its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(TRICKLE_FOR)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                got = conn.recv(4096)
                if not got:
                    return
                head += got
            with contextlib.suppress(OSError):  # the client cut the connection: what a deadline does
                answer(conn, stop)

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def trickle_body(conn: socket.socket, stop: threading.Event) -> None:
    """Headers at once, then one byte of a long body every 0.2 s (no read ever waits 10 s)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
    ends = time.monotonic() + TRICKLE_FOR
    while not stop.is_set() and time.monotonic() < ends:
        conn.sendall(b" ")
        time.sleep(0.2)


def trickle_headers(conn: socket.socket, stop: threading.Event) -> None:
    """A status line, then one byte of an endless header every 0.2 s."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    ends = time.monotonic() + TRICKLE_FOR
    while not stop.is_set() and time.monotonic() < ends:
        conn.sendall(b"a")
        time.sleep(0.2)


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Reads the request and answers nothing until it stops."""
    stop.wait(TRICKLE_FOR)


@pytest.mark.parametrize("answer", [trickle_body, trickle_headers, silent], ids=lambda f: f.__name__)
def test_every_call_of_a_visit_ends_by_its_deadline_however_the_member_trickles(answer: Answer) -> None:
    with stand_in(answer) as url:
        started = time.monotonic()
        with member_api(kubeconfig(url), deadline=DEADLINE, answer_limit=1 << 20, timeout=10) as api, \
                pytest.raises(Unavailable):
            api.server_version()
        elapsed = time.monotonic() - started
        # A later call of the same visit does not even start.
        with pytest.raises(Unavailable, match="deadline"):
            api.get(SECRETS, "x", namespace="y")
    assert elapsed < DEADLINE + 1.0, elapsed


def gzip_bomb(conn: socket.socket, stop: threading.Event) -> None:
    """64 MiB of JSON whitespace in ~64 KiB of gzip, sent though the request asked for identity."""
    body = gzip.compress(b"{" + b" " * (64 << 20) + b"}", compresslevel=9)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)


SENT: list[int] = []


def endless_chunks(conn: socket.socket, stop: threading.Event) -> None:
    """A chunked answer with no length said, up to 64 MiB; counts what it sent."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b" " * 65536
    for _ in range(1024):
        conn.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        SENT[0] += len(piece)


def declared_huge(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2000000000\r\n\r\n{")


@pytest.mark.parametrize(("answer", "reason"), [
    (gzip_bomb, "compressed \\(gzip\\), which the hub did not ask for"),
    (endless_chunks, "over the limit of 1048576 bytes"),
    (declared_huge, "2000000000 bytes, over the limit"),
], ids=["gzip", "chunked", "content-length"])
def test_a_member_answer_is_read_to_its_cap_and_never_inflated(answer: Answer, reason: str) -> None:
    SENT[:] = [0]
    with stand_in(answer) as url, member_api(kubeconfig(url), deadline=10, answer_limit=hub.MEMBER_ANSWER_LIMIT,
                                             timeout=10) as api, pytest.raises(AnswerRefused, match=reason):
        api.server_version()
    # What the client read before it stopped: the cap and the socket buffers, not the 64 MiB on offer.
    assert SENT[0] < 16 << 20, SENT[0]


def test_a_slow_member_delays_no_other_member_and_the_pass_ends_by_the_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub with one healthy member and two trickling ones: the pass ends within two deadlines (the report
    read, then the visit; the members side by side), the healthy member has both intermediates, the slow
    ones are not ready with the reason. Before: the pass sat on the first slow member's connection for as
    long as it trickled (one byte every 0.2 s never trips a 10 s read timeout), twice per member."""
    monkeypatch.setattr(hub, "VISIT_DEADLINE_SECONDS", DEADLINE)
    with ExitStack() as stack:
        the_hub = stack.enter_context(running_emulator(seed=1))
        east = stack.enter_context(running_emulator(seed=2))
        for emu in (the_hub, east):
            namespace(emu, OWN_NS)
        register(the_hub, "east", east.kubeconfig())
        for name, answer in (("slow", trickle_body), ("slower", trickle_headers)):
            register(the_hub, name, kubeconfig(stack.enter_context(stand_in(answer))))
        reconciler = Reconciler(KubeApi(the_hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True),
                                clock=lambda: datetime.now(UTC))
        started = time.monotonic()
        report = reconciler.run_pass()
        elapsed = time.monotonic() - started
    assert elapsed < 2 * DEADLINE + 4.0, elapsed
    assert not report.aborted, report.aborted
    assert set(report.federation) == {"slow", "slower"}, report.federation
    for name in ("slow", "slower"):
        assert "deadline of 1.5s passed" in report.federation[name] or "unreachable" in report.federation[name]
    for secret in INTERMEDIATES:
        assert east.get("secrets", secret, OWN_NS) is not None, secret
