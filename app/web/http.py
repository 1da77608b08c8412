"""A small HTTP/1.1 server for the admission port: asyncio protocol on uvloop, httptools for parsing.

Why not a general ASGI server: the request path is the product. Per request this does one parse, one
synchronous handler call and one `write` of precomputed header bytes plus the JSON body; no message
dicts, no tasks, no per-request timers. Keep-alive and pipelining are HTTP/1.1's own.

Bounded from the first byte (values and reasons in tls_injector.settings.Limits and docs/serving.md): the request
head's size and header count, the body's size, the time allowed for the TLS handshake, the head, the
body and an idle kept-alive connection, and the number of open connections. A limit that trips answers
with a status (431, 413, 408) where the client can still read one, then closes.

Timeouts are deadlines on each connection, checked by one sweeper task (`ConnectionSet.sweep`) rather
than a timer per request: a kept-alive request then costs one `monotonic()` call, not a timer handle.

This module is the connection itself: the protocol, its phases and what each request does to them, flow
control and batches. Beside it: tls_injector.web.connections (the table of open connections, their caps,
the sweeper, the drain), tls_injector.web.request_head (a head read and checked against its limits, an
Upgrade's head parsed again) and tls_injector.web.answers (the bytes of each answer). Their functions are
imported by name and called where the connection's own methods were: a request pays no call for the split.

Bounded on the way out too: a connection whose answers are not being read stops being read (above
WRITE_BUFFER_HIGH bytes of unsent answers its reading pauses, and resumes when they drain), and requests
pipelined on one connection are answered in batches (BATCH_SECONDS of work, at most BATCH_REQUESTS), the
rest on later turns of the event loop, so one connection never holds the loop for long.

HTTP/1.1 as RFC 9110/9112 ask (tests/test_http_conformance.py holds the table, against Go's net/http too):
HEAD is answered as GET without the body; an Upgrade request is answered as HTTP/1.1 and the connection
goes on; `Expect: 100-continue` gets 100 Continue or, where the body will not be read, the final answer
at once; a request with no Host or several is a 400; an absolute-form target is routed by its path; a
transfer coding other than chunked is a 501; a version other than 1.0 and 1.1 is a 505.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httptools
import orjson

from tls_injector.web.answers import CLOSE, KEEP, Clock, response_bytes
from tls_injector.web.connections import BODY, HEAD, IDLE, LINGER, NEW, ConnectionSet, source_of
from tls_injector.web.endpoints import JSON_TYPE, AdmissionEndpoint, HttpError
from tls_injector.web.health import JSON, Plain
from tls_injector.web.request_head import (
    HeadTooLarge,
    absolute_path,
    check_head,
    expects_continue,
    read_head,
    without_upgrade,
)

log = logging.getLogger("tls_injector.http")
# One clock read per read of the socket (the connection's `now`): the deadlines it sets, and the end of the
# batch it starts, count from when the bytes arrived.
_monotonic = time.monotonic


@dataclass(frozen=True)
class Routes:
    admission: dict[bytes, AdmissionEndpoint]
    plain: dict[bytes, Callable[[], Plain]]


# Unsent answers above this pause the connection's reading; below the low mark it resumes. 16 KiB holds
# several admission answers (1-3 KB each) or a /metrics page: a client reading its answers never meets it
# (the kernel takes them at once), one that stops reading costs this much memory and no more (64 KiB was,
# times 250 connections of one source, a quarter of the pod's memory limit: docs/serving.md "Memory").
WRITE_BUFFER_HIGH = 16 * 1024
WRITE_BUFFER_LOW = 4 * 1024
# Work done for one connection before the loop serves the others: an admission review costs 0.1-0.5 ms, so
# a batch is a few of them; a request that alone costs more (/metrics renders in ~1-10 ms) is a batch of one.
BATCH_SECONDS = 0.002
BATCH_REQUESTS = 16


# A request parsed whole, answered now or waiting behind a batch: (endpoint, path, method, content type,
# body, close). A plain tuple: a class's __init__ would cost a Python call per request.
Parsed = tuple[AdmissionEndpoint | None, bytes, bytes, bytes, bytes, bool]


class _Stop(Exception):
    pass


# Encrypted bytes uvloop's TLS layer holds that the connection has not read yet, above which it stops
# reading the socket (its default is 256 KiB, and one socket read more): what a client that is not being
# read can leave in the server's memory. 16 KiB keeps a record ahead of the parser.
TLS_READ_AHEAD_BYTES = 16 * 1024
# The kernel's buffers of each connection (set on the listening socket; the kernel doubles the value).
# Left to autotuning, a connection the server stops reading, or one whose client stops reading, held up to
# megabytes each way (loopback: 6 MiB in, 4 MiB out), charged to the pod's memory limit like the process's
# own, and each socket read filled up to 256 KiB of uvloop's per-connection read buffer. 16 KiB (32 KiB as
# the kernel doubles it) is a window of 32 KiB: at a 1 ms round trip 32 MB/s, a 7 MiB body in ~0.2 s, far
# inside the body deadline; reviews of a few KiB are unaffected.
SOCKET_BUFFER_BYTES = 16 * 1024


class HttpConnection(asyncio.BufferedProtocol):
    """One client connection. Parser callbacks (`on_*`) run inside `buffer_updated`."""

    def __init__(self, connections: ConnectionSet, routes: Routes) -> None:
        self.connections, self.routes, self.limits = connections, routes, connections.limits
        # Read for every request: kept here rather than looked up through `limits` each time.
        self.max_head_bytes, self.max_headers = self.limits.max_head_bytes, self.limits.max_headers
        self.max_body_bytes = self.limits.max_body_bytes
        self.max_body_digits = len(str(self.max_body_bytes))  # a length of fewer digits is under the cap
        self.admission = routes.admission
        self.head_seconds, self.body_seconds = self.limits.head_seconds, self.limits.body_seconds
        self.idle_seconds = self.limits.idle_seconds
        self.now = 0.0  # when the bytes being parsed were read
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.phase = NEW
        self.deadline = 0.0
        self.started = 0.0
        self.source = ""
        self.served = 0  # requests answered on this connection
        self.closing = False
        self.waiting: list[Parsed] = []  # parsed and not yet answered: beyond this turn's batch
        self.batch_ends = 0.0
        self.batch_left = 0
        self.writing_paused = self.reading_paused = False
        # The request being parsed: its target and fields until its head is complete, then what is read of
        # them (on_headers_complete), then its body.
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []  # the head's fields, as sent
        self.unparsed_head = 0
        self.path = self.method = self.content_type = b""
        self.endpoint: AdmissionEndpoint | None = None
        self.body: list[bytes] = []  # emptied as each request completes: a body is not held while idle
        self.body_size = 0
        self.replay = b""  # the head of an Upgrade request with a body, to be parsed again without its Upgrade

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.source = source_of(transport.get_extra_info("peername"))
        self.started = time.monotonic()
        if not self.connections.admit(self):
            transport.abort()  # type: ignore[attr-defined]
            return
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)  # type: ignore[attr-defined]
        transport.set_read_buffer_limits(high=TLS_READ_AHEAD_BYTES)  # type: ignore[attr-defined]
        # A connection that has sent nothing yet is idle, not slow: Go's http.Transport (the apiserver's
        # client) dials a spare connection when a request waits and keeps it in its idle pool unused
        # when another frees up first. Closing it at the head timeout raced with the apiserver's next
        # review on it (seen on the node tier: "the server responded with the status code 408"); it
        # gets the idle timeout, which Go's own (90 s) undercuts, and the head timeout starts at its
        # first byte. A silent flood holds slots no longer than the table's limits let it
        # (`ConnectionSet.admit`: per source, and the first evicted when the table is full).
        self.deadline = self.started + self.idle_seconds

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.forget(self)
        self.connections.closed += 1
        self.phase = LINGER  # nothing reads the parser from here on (`buffer_updated` returns at once)
        # Two reference cycles end here: this protocol -> its parser -> the parser's callbacks (this
        # protocol's methods), and this protocol -> its transport -> this protocol. Left in place, a closed
        # connection and what its transport holds outside Python's heap (OpenSSL's state and buffers,
        # uvloop's read buffer) waited for the next full garbage collection: in a soak with about 25 new
        # connections a second the C heap swung by 12 MiB every 15-20 s. Broken, reference counting frees
        # them now.
        self.transport = None
        self.waiting.clear()
        del self.parser

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.connections.read_buffer

    # flow control: answers not read by the client stop the reading of its requests

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._answer_waiting()

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.transport.is_closing():
            self.reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None and not self.transport.is_closing():
            self.reading_paused = False
            self.transport.resume_reading()

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` decrypted bytes were read into the shared buffer: parsed now, before the next read."""
        if self.phase == LINGER:
            return  # an error was answered: what follows is dropped until the connection closes
        data: memoryview | bytes = self.connections.read_buffer[:nbytes]
        self.now = now = _monotonic()
        self.batch_ends, self.batch_left = now + BATCH_SECONDS, BATCH_REQUESTS
        while True:
            if self.phase != BODY:
                # The parser reports a header only once it is complete: a head that never ends is counted
                # here, as received, and checked once this read is parsed.
                self.unparsed_head += len(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserCallbackError as error:
                if not isinstance(error.__context__, _Stop):
                    raise
            except httptools.HttpParserUpgrade as upgrade:
                # RFC 9110 7.8: a server may ignore Upgrade, and answers as HTTP/1.1 (Go's net/http does the
                # same); what follows on the connection is parsed afresh. llhttp ends an Upgrade request at
                # its head, whatever body it declares; such a request's head is parsed again without its
                # Upgrade, followed by what came after it (its body), so it is read and answered whole.
                self.parser = httptools.HttpRequestParser(self)
                self.unparsed_head = 0
                data = data[upgrade.args[0]:]
                if self.replay:
                    data, self.replay = self.replay + data, b""
                if data and self.phase != LINGER:
                    continue
            except httptools.HttpParserError:
                self._fail(HttpError(400, "malformed HTTP request"))
            else:
                if self.phase in (NEW, HEAD):  # the head goes on in a later read
                    self._check_unfinished_head()
            break
        if self.waiting:  # past this turn's batch: answered on the next turns, nothing read meanwhile
            self._pause_reading()
            asyncio.get_running_loop().call_soon(self._answer_waiting)

    def _check_unfinished_head(self) -> None:
        """A read ended inside a head: its fields so far, and all of it received (the parser reports a
        field only once it is complete), within the head's limits."""
        head = read_head(self.url, self.fields, self.max_head_bytes, self.max_headers)
        if not isinstance(head, tuple):
            self._refuse_head(head)
        elif self.unparsed_head > self.max_head_bytes:
            self._refuse_head(HeadTooLarge(self.max_head_bytes))

    def _refuse_head(self, error: HttpError) -> None:
        """Answers the first limit a head breaks (`read_head`); one over the size cap is counted apart."""
        if isinstance(error, HeadTooLarge):
            self.connections.metrics.connections_closed.labels("head_too_large").inc()
        self._fail(error)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # parser callbacks

    def on_message_begin(self) -> None:
        if self.phase in (IDLE, NEW):
            self.deadline = self.now + self.head_seconds
        self.phase = HEAD
        self.body_size = 0

    def on_url(self, url: bytes) -> None:
        self.url += url  # its size is the head's, checked with the fields (`read_head`)

    def on_header(self, name: bytes, value: bytes) -> None:
        fields = self.fields
        fields.append((name, value))
        # Refused at once, as they arrive: one field too many (a head of tiny fields is many calls), and a
        # transfer coding other than chunked (before the parser meets what else the head holds).
        if len(fields) > self.max_headers or (len(name) == 17 and name.lower() == b"transfer-encoding"):
            head = read_head(self.url, fields, self.max_head_bytes, self.max_headers)
            if not isinstance(head, tuple):
                self._refuse_head(head)
                raise _Stop

    def on_headers_complete(self) -> None:
        self.phase = BODY
        self.unparsed_head = 0
        self.deadline = self.now + self.body_seconds
        head = read_head(self.url, self.fields, self.max_head_bytes, self.max_headers)
        if not isinstance(head, tuple):
            self._refuse_head(head)
            raise _Stop
        content_type, content_length, hosts, expect, chunked = head
        parser = self.parser
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            self._fail(HttpError(505, "HTTP/1.1 only"))
            raise _Stop
        if hosts != 1 and (hosts or version == "1.1"):  # RFC 9112 3.2
            self._fail(HttpError(400, "exactly one Host header is required"))
            raise _Stop
        # One C call for a request with a body (~100 instructions of a review's ~280k).
        if (chunked or content_length not in (b"", b"0")) and parser.should_upgrade():
            self.replay = without_upgrade(parser.get_method(), self.url, version, self.fields)
        url, self.url, self.fields = self.url, b"", []  # nothing of a head is kept past it
        self.path = path = (url if url[:1] == b"/" else absolute_path(url)).split(b"?", 1)[0]
        self.method = method = parser.get_method()
        self.content_type = content_type
        self.endpoint = endpoint = self.admission.get(path)
        if endpoint is None:
            if expect and expects_continue(expect) and (content_length not in (b"", b"0") or chunked):
                # Its body would only be dropped: the final answer now rather than 100 Continue (RFC 9110 10.1.1).
                self._linger(self._plain(True, path, method))
                raise _Stop
            return
        # The head every client sends is checked without a call: a POST of JSON, a length of fewer digits
        # than the cap's (so under it; int() of it cost ~1k instructions).
        if method != b"POST" or content_type != JSON_TYPE or len(content_length) >= self.max_body_digits \
                or (content_length and not content_length.isdigit()):
            try:
                check_head(method, content_type, content_length, self.max_body_bytes)
            except HttpError as error:
                self._answer_early(endpoint, error)
                raise _Stop from None
        if expect and expects_continue(expect):
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        self.body_size = size = self.body_size + len(chunk)
        if size > self.max_body_bytes:
            error = HttpError(413, f"body larger than {self.max_body_bytes} bytes")
            if self.endpoint is None:
                self._fail(error)
            else:
                self._answer_early(self.endpoint, error)
            raise _Stop
        if self.endpoint is not None:
            self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.replay:  # the parser cut an Upgrade request's body off: it is answered once parsed again
            return
        close = self.closing or self.connections.draining or not self.parser.should_keep_alive()
        chunks = self.body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.served += 1  # a request completed (answered now or in a later batch)
        self.deadline = self.now + self.idle_seconds
        if close:
            self.phase = LINGER  # nothing more is read
            self.closing = True
        else:
            self.phase = IDLE
        parsed = (self.endpoint, self.path, self.method, self.content_type, body, close)
        # The first request of a read begins its batch: answered without reading the clock.
        if self.waiting or self.writing_paused or self.batch_left <= 0 or \
                (self.batch_left < BATCH_REQUESTS and _monotonic() > self.batch_ends):
            self.waiting.append(parsed)
        else:
            self.batch_left -= 1
            self._answer(parsed)
        if close:
            raise _Stop  # anything pipelined after a close is not answered

    def _answer_waiting(self) -> None:
        """The next batch of requests parsed but not yet answered; reading resumes once none is left."""
        self.batch_ends, self.batch_left = _monotonic() + BATCH_SECONDS, BATCH_REQUESTS
        while self.waiting and not self.writing_paused and self.transport is not None:
            if self.batch_left <= 0 or _monotonic() > self.batch_ends:
                asyncio.get_running_loop().call_soon(self._answer_waiting)
                return
            self.batch_left -= 1
            self._answer(self.waiting.pop(0))
        if not self.waiting and not self.writing_paused:
            self._resume_reading()

    def _answer(self, parsed: Parsed) -> None:
        endpoint, path, method, content_type, body, close = parsed
        if endpoint is None:
            response = self._plain(close, path, method)
        else:  # a POST: anything else was answered from its head (check_call)
            status, payload, headers = endpoint.answer(method, content_type, body)
            if status == 200 and not headers:  # the head made each second (Clock.ok_json)
                response = b"%s%d%s%s" % (Clock.ok_json, len(payload), CLOSE if close else KEEP, payload)
            else:
                response = response_bytes(status, JSON, payload, close=close, headers=headers)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(response)
        if close:
            self.closing = True
            self.phase = LINGER
            self.waiting.clear()
            if transport is not None:
                transport.close()

    def _plain(self, close: bool, path: bytes, method: bytes) -> bytes:
        head_only = method == b"HEAD"
        route = self.routes.plain.get(path)
        if route is None:
            return response_bytes(404, JSON, b'{"error":"not found"}', close=close, head_only=head_only)
        if method not in (b"GET", b"HEAD"):
            return response_bytes(405, JSON, b'{"error":"use GET"}', close=close,
                                  headers=((b"allow", b"GET, HEAD"),))
        status, content_type, body = route()
        return response_bytes(status, content_type, body, close=close, head_only=head_only)

    # ending a request early

    def _answer_early(self, endpoint: AdmissionEndpoint, error: HttpError) -> None:
        status, payload, headers = endpoint.refuse(error)
        self._linger(response_bytes(status, JSON, payload, close=True, headers=headers,
                                    head_only=self.method == b"HEAD"))

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

    def idle_since(self) -> float:
        """When it last went idle (its start, for one that never sent a request): its idle deadline less
        the idle timeout."""
        return self.deadline - self.idle_seconds

    def expire(self) -> None:
        """The current phase's deadline passed."""
        if self.phase == LINGER:
            self.connections.metrics.connections_closed.labels("linger_end").inc()
            self._close_after_write()
        elif self.phase == HEAD:
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
