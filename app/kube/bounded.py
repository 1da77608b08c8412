"""Calls to an API server we do not trust to answer well (a member cluster, docs/multicluster.md): every
call of one visit shares one deadline, and every answer is read in bounded pieces.

urllib3's timeouts are per socket operation: a server that sends one byte every few seconds never trips
them, in the TLS handshake, the headers or the body. So the deadline is kept two ways: each call's
socket timeouts are at most what is left of it, and when it passes a timer shuts down every socket the
visit opened, which ends whatever read is waiting on one (the thread gets an error, never a hang).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3

from tls_injector.kube.errors import AnswerRefused, Unavailable


@dataclass
class Deadline:
    """One visit's end (time.monotonic()), and the connections opened before it."""

    seconds: float
    ends: float = field(default=0.0)
    passed: bool = False
    _connections: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.ends = time.monotonic() + self.seconds

    def remaining(self, what: str) -> float:
        """Seconds left for the next call; Unavailable when none are (no call starts after the end)."""
        left = self.ends - time.monotonic()
        if left <= 0 or self.passed:
            raise Unavailable(f"{what}: the visit's deadline of {self.seconds:g}s passed")
        return left

    def opened(self, connection: Any) -> None:
        with self._lock:
            self._connections.append(connection)
        if self.passed:  # opened as the timer fired: cut it too
            self.cut()

    def cut(self) -> None:
        """Shut down every socket of the visit: a blocked read returns at once with an error."""
        self.passed = True
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            sock = getattr(connection, "sock", None)
            if sock is None:
                continue
            # socket.socket's own shutdown on the descriptor: SSLSocket.shutdown would also drop its SSL
            # object under the thread that is reading with it. OSError: closed already.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _tracking(pool: type[urllib3.HTTPConnectionPool], deadline: Deadline) -> type[urllib3.HTTPConnectionPool]:
    class Tracked(pool):  # type: ignore[valid-type,misc]
        def _new_conn(self) -> Any:
            connection = super()._new_conn()
            deadline.opened(connection)
            return connection

    return Tracked


@contextmanager
def deadline_for(api_client: Any, seconds: float) -> Iterator[Deadline]:
    """A deadline over every connection `api_client` (a kubernetes ApiClient) opens inside the block."""
    deadline = Deadline(seconds)
    manager = api_client.rest_client.pool_manager
    manager.pool_classes_by_scheme = {"http": _tracking(urllib3.HTTPConnectionPool, deadline),
                                      "https": _tracking(urllib3.HTTPSConnectionPool, deadline)}
    timer = threading.Timer(seconds, deadline.cut)
    timer.daemon = True
    timer.start()
    try:
        yield deadline
    finally:
        timer.cancel()


# Read in pieces of 64 KiB: one read1 returns what one recv gave, so a trickling server is seen between
# pieces, and an answer over the cap is stopped within one piece of it.
_PIECE = 64 * 1024


def read_capped(raw: urllib3.BaseHTTPResponse, *, limit: int, what: str) -> bytes:
    """The answer's body, refused when it is compressed (nothing asked for it: the request says
    Accept-Encoding: identity, and an inflating answer could weigh a thousand times its bytes on the wire)
    or longer than `limit` bytes (told by Content-Length, or counted as it comes)."""
    encoding = str(raw.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        _discard(raw)
        raise AnswerRefused(f"{what}: the answer is compressed ({encoding[:40]}), which the hub did not ask for")
    declared = raw.headers.get("Content-Length")
    if declared and declared.strip().isdigit() and int(declared) > limit:
        _discard(raw)
        raise AnswerRefused(f"{what}: the answer is {int(declared)} bytes, over the limit of {limit}")
    pieces: list[bytes] = []
    size = 0
    while piece := raw.read1(_PIECE, decode_content=False):
        size += len(piece)
        if size > limit:
            _discard(raw)
            raise AnswerRefused(f"{what}: the answer is over the limit of {limit} bytes")
        pieces.append(piece)
    return b"".join(pieces)


def _discard(raw: urllib3.BaseHTTPResponse) -> None:
    """Close the connection of an answer left unread (it must not serve the next call), and give it back
    to its pool (which opens a new one)."""
    raw.close()
    raw.release_conn()
