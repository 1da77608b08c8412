"""A small HTTP/1.1 server for the admission port: asyncio protocol on uvloop, httptools for parsing.

Why not a general ASGI server: the request path is the product. Per request this does one parse, one
synchronous handler call and one `write` of precomputed header bytes plus the JSON body; no message
dicts, no tasks, no per-request timers. Keep-alive and pipelining are HTTP/1.1's own.

Bounded from the first byte (values and reasons in app.settings.Limits and docs/serving.md): the request
head's size and header count, the body's size, the time allowed for the TLS handshake, the head, the
body and an idle kept-alive connection, and the number of open connections. A limit that trips answers
with a status (431, 413, 408) where the client can still read one, then closes.

Timeouts are deadlines on each connection, checked by one sweeper task (`ConnectionSet.sweep`) rather
than a timer per request: a kept-alive request then costs one `monotonic()` call, not a timer handle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate

import httptools
import orjson

from app.settings import Limits
from app.web.app import JSON, Plain
from app.web.endpoints import AdmissionEndpoint, Headers, HttpError, check_call
from app.web.metrics import ServerMetrics

log = logging.getLogger("tls_injector.http")


@dataclass(frozen=True)
class Routes:
    admission: dict[bytes, AdmissionEndpoint]
    plain: dict[bytes, Callable[[], Plain]]


REASONS = {100: b"Continue", 200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
           408: b"Request Timeout", 413: b"Content Too Large", 415: b"Unsupported Media Type",
           431: b"Request Header Fields Too Large", 500: b"Internal Server Error", 503: b"Service Unavailable"}
_KEEP, _CLOSE = b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n"


class Clock:
    """The Date header, formatted once a second by the sweeper rather than once per response."""

    date = b""

    @classmethod
    def tick(cls) -> None:
        cls.date = formatdate(usegmt=True).encode()


Clock.tick()


def response_bytes(status: int, content_type: bytes, body: bytes, *, close: bool, headers: Headers = ()) -> bytes:
    extra = b"".join(b"%s: %s\r\n" % pair for pair in headers)
    head = b"HTTP/1.1 %d %s\r\ndate: %s\r\ncontent-type: %s\r\n%scontent-length: %d" % (
        status, REASONS.get(status, b"Error"), Clock.date, content_type, extra, len(body))
    return head + (_CLOSE if close else _KEEP) + body


class _Stop(Exception):
    pass


# Connection phases; each has its own deadline.
NEW, HEAD, BODY, IDLE, LINGER = "new", "head", "body", "idle", "linger"


# Decrypted bytes are read into one buffer that every connection of a server shares: a read is handed to
# the parser at once and never kept (the parser copies what it passes on), so one buffer is enough, and
# it is the size of the largest read uvloop's TLS layer makes. A read into a fresh bytes object instead
# cost three system calls per request (mmap, mremap, munmap: a buffer of that size is an mmap of its own).
READ_BUFFER_BYTES = 256 * 1024


class ConnectionSet:
    """The open connections of one server, their caps (in all and per source address), the sweeper that
    enforces deadlines, and the buffer connections read into.

    When the table is full, a newcomer may take the slot of a connection that has not completed a request
    (a client that connected and said nothing, or is still trickling its first head), and only one from
    the source holding the most connections, when that source holds more than the newcomer's would: a
    flood from one address then displaces only itself. A connection that has completed a request (the
    apiserver's kept-alive connections) is never closed to make room for one that has not sent a request
    yet; with no such slot to take the newcomer is closed instead.
    """

    def __init__(self, limits: Limits, metrics: ServerMetrics) -> None:
        self.limits, self.metrics = limits, metrics
        self.open: set[HttpConnection] = set()
        self.by_source: dict[str, set[HttpConnection]] = {}
        self.closed = 0  # connections ended so far, however they ended
        self.draining = False
        self.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))

    def admit(self, connection: HttpConnection) -> bool:
        if self.draining:  # its handshake finished after the listener closed
            return self._refuse("shutdown")
        held = len(self.by_source.get(connection.source, ()))
        if held >= self.limits.max_connections_per_source:
            return self._refuse("source_over_capacity")
        if len(self.open) >= self.limits.max_connections:
            victim = self._unproven_of_heaviest(held)
            if victim is None:
                return self._refuse("over_capacity")
            victim.abort("evicted_unproven")
        self.open.add(connection)
        self.by_source.setdefault(connection.source, set()).add(connection)
        return True

    def _refuse(self, reason: str) -> bool:
        self.metrics.connections_closed.labels(reason).inc()
        return False

    def _unproven_of_heaviest(self, held: int) -> HttpConnection | None:
        """The oldest connection without a completed request of the source holding the most connections,
        if that source holds at least two more than the newcomer's (so the swap never makes it the lighter)."""
        heavy = sorted((c for c in self.by_source.values() if len(c) > held + 1), key=len, reverse=True)
        for connections in heavy:
            unproven = [c for c in connections if not c.served and c.phase in (NEW, HEAD)]
            if unproven:
                return min(unproven, key=lambda c: c.started)
        return None

    def forget(self, connection: HttpConnection) -> None:
        self.open.discard(connection)
        same = self.by_source.get(connection.source)
        if same is not None:
            same.discard(connection)
            if not same:
                del self.by_source[connection.source]

    def sweep(self, now: float) -> None:
        for connection in [c for c in self.open if c.deadline <= now]:
            connection.expire()

    def drain(self) -> None:
        """Stop keeping connections alive: idle ones close now, busy ones after their answer."""
        self.draining = True
        for connection in list(self.open):
            if connection.phase in (IDLE, NEW):
                connection.abort("shutdown")


def source_of(peername: object) -> str:
    """The client's address without its port: what the per-source cap counts. An IPv4 address seen
    through an IPv6 socket (::ffff:a.b.c.d) is the IPv4 address, so one client is one source either way."""
    if not isinstance(peername, tuple) or not peername:
        return ""
    host = str(peername[0])
    return host[7:] if host.startswith("::ffff:") and "." in host else host


class HttpConnection(asyncio.BufferedProtocol):
    """One client connection. Parser callbacks (`on_*`) run inside `received`."""

    def __init__(self, connections: ConnectionSet, routes: Routes) -> None:
        self.connections, self.routes, self.limits = connections, routes, connections.limits
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.phase = NEW
        self.deadline = 0.0
        self.started = 0.0
        self.source = ""
        self.served = 0  # requests answered on this connection
        self.closing = False
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.content_type = b""
        self.content_length = b""
        self.expect_continue = False
        self.head_size = 0
        self.unparsed_head = 0
        self.header_count = 0
        self.body: list[bytes] = []
        self.body_size = 0
        self.endpoint: AdmissionEndpoint | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.source = source_of(transport.get_extra_info("peername"))
        self.started = time.monotonic()
        if not self.connections.admit(self):
            transport.abort()  # type: ignore[attr-defined]
            return
        # The first request's head is due within head_seconds of the connection's start, not of its
        # first byte: a client that connects and says nothing is a slow client too.
        self.deadline = self.started + self.limits.head_seconds

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.forget(self)
        self.connections.closed += 1
        self.phase = LINGER  # nothing reads the parser from here on (`received` returns at once)
        # Two reference cycles end here: this protocol -> its parser -> the parser's callbacks (this
        # protocol's methods), and this protocol -> its transport -> this protocol. Left in place, a closed
        # connection and what its transport holds outside Python's heap (OpenSSL's state and buffers,
        # uvloop's read buffer) waited for the next full garbage collection: in a soak with about 25 new
        # connections a second the C heap swung by 12 MiB every 15-20 s. Broken, reference counting frees
        # them now.
        self.transport = None
        del self.parser

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.connections.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.received(self.connections.read_buffer[:nbytes])

    def received(self, data: memoryview) -> None:
        if self.phase == LINGER:
            return  # an error was answered: what follows is dropped until the connection closes
        if self.phase != BODY:
            # The parser reports a header only once it is complete: a head that never ends is counted
            # here, as received, and checked once this read is parsed.
            self.unparsed_head += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            if not isinstance(error.__context__, _Stop):
                raise
        except httptools.HttpParserUpgrade:
            self._fail(HttpError(400, "protocol upgrades are not served"))
        except httptools.HttpParserError:
            self._fail(HttpError(400, "malformed HTTP request"))
        else:
            if self.phase in (NEW, HEAD) and self.unparsed_head > self.limits.max_head_bytes:
                self._head_too_large()

    def _head_too_large(self) -> None:
        self.connections.metrics.connections_closed.labels("head_too_large").inc()
        self._fail(HttpError(431, f"request head larger than {self.limits.max_head_bytes} bytes"))

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # parser callbacks

    def on_message_begin(self) -> None:
        if self.phase == IDLE:
            self.deadline = time.monotonic() + self.limits.head_seconds
        self.phase = HEAD

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        self._count_head(len(name) + len(value) + 4)
        if self.header_count > self.limits.max_headers:
            self._fail(HttpError(431, f"more than {self.limits.max_headers} header fields"))
            raise _Stop
        lowered = name.lower()
        if lowered == b"content-type":
            self.content_type = value
        elif lowered == b"content-length":
            self.content_length = value
        elif lowered == b"expect":
            self.expect_continue = value.lower() == b"100-continue"

    def _count_head(self, size: int) -> None:
        self.head_size += size
        if self.head_size > self.limits.max_head_bytes:
            self._head_too_large()
            raise _Stop

    def on_headers_complete(self) -> None:
        self.phase = BODY
        self.unparsed_head = 0
        self.deadline = time.monotonic() + self.limits.body_seconds
        path = self.url.split(b"?", 1)[0]
        self.endpoint = self.routes.admission.get(path)
        if self.endpoint is None:
            return
        try:
            check_call(self.parser.get_method(), self.content_type)
            declared = self.content_length
            if declared and (not declared.isdigit() or int(declared) > self.limits.max_body_bytes):
                raise HttpError(413 if declared.isdigit() else 400, "body larger than the limit or invalid length")
        except HttpError as error:
            self._answer_early(self.endpoint, error)
            raise _Stop from None
        if self.expect_continue:
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        self.body_size += len(chunk)
        if self.body_size > self.limits.max_body_bytes:
            error = HttpError(413, f"body larger than {self.limits.max_body_bytes} bytes")
            if self.endpoint is None:
                self._fail(error)
            else:
                self._answer_early(self.endpoint, error)
            raise _Stop
        if self.endpoint is not None:
            self.body.append(chunk)

    def on_message_complete(self) -> None:
        close = self.closing or self.connections.draining or not self.parser.should_keep_alive()
        if self.endpoint is not None:
            body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
            status, payload, headers = self.endpoint.answer(self.parser.get_method(), self.content_type, body)
            self._write(response_bytes(status, JSON, payload, close=close, headers=headers))
        else:
            self._write(self._plain(close))
        self._reset()
        self.served += 1
        if close:
            self.closing = True
            self.phase = LINGER
            if self.transport is not None:
                self.transport.close()
            raise _Stop  # anything pipelined after a close is not answered
        self.phase = IDLE
        self.deadline = time.monotonic() + self.limits.idle_seconds

    def _plain(self, close: bool) -> bytes:
        route = self.routes.plain.get(self.url.split(b"?", 1)[0])
        if route is None:
            return response_bytes(404, JSON, b'{"error":"not found"}', close=close)
        if self.parser.get_method() != b"GET":
            return response_bytes(405, JSON, b'{"error":"use GET"}', close=close, headers=((b"allow", b"GET"),))
        status, content_type, body = route()
        return response_bytes(status, content_type, body, close=close)

    # ending a request early

    def _answer_early(self, endpoint: AdmissionEndpoint, error: HttpError) -> None:
        status, payload, headers = endpoint.refuse(error)
        self._linger(response_bytes(status, JSON, payload, close=True, headers=headers))

    def _fail(self, error: HttpError) -> None:
        body = orjson.dumps({"error": error.message})
        self._linger(response_bytes(error.status, JSON, body, close=True, headers=error.headers))

    def _linger(self, response: bytes) -> None:
        self._write(response)
        self.phase = LINGER
        self.closing = True
        self.deadline = time.monotonic() + self.limits.linger_seconds

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def expire(self) -> None:
        """The current phase's deadline passed."""
        if self.phase == LINGER:
            self.connections.metrics.connections_closed.labels("linger_end").inc()
            self._close_after_write()
        elif self.phase in (HEAD, NEW):
            self._timeout("head_timeout", 408, "request head not received in time")
        elif self.phase == BODY:
            self._timeout("body_timeout", 408, "request body not received in time")
        else:
            self.abort("idle_timeout")

    def _timeout(self, reason: str, status: int, message: str) -> None:
        self.connections.metrics.connections_closed.labels(reason).inc()
        self._write(response_bytes(status, JSON, orjson.dumps({"error": message}), close=True))
        self._close_after_write()

    def _close_after_write(self) -> None:
        self.connections.forget(self)
        self.phase = LINGER
        self.deadline = float("inf")
        if self.transport is not None:
            self.transport.close()  # flushes what was written; the TLS shutdown is bounded by the server

    def abort(self, reason: str) -> None:
        self.connections.metrics.connections_closed.labels(reason).inc()
        self.connections.forget(self)
        self.phase = LINGER
        self.deadline = float("inf")
        if self.transport is not None:
            self.transport.abort()
