"""The operator port: /healthz, /readyz and /metrics (and, in the reconciler, its status) on FastAPI + uvicorn.

One module for both processes. The webhook (`serve --probe-port`, or the supervisor of `serve --workers`)
and the reconciler (`reconcile --metrics-port`) each run it in a thread of its own with an event loop of
its own, so neither a wedged admission loop nor a full admission port (every connection slot held, slow
clients) keeps the kubelet's probes or Prometheus from an answer; /healthz in the webhook reports the
admission loop's heartbeat, which the admission port cannot do about itself.

Every endpoint is `async def`: uvicorn runs them on its one loop, and no request ever takes a thread from
a pool, so a flood of clients costs sockets, never threads. The sockets are capped too (`PortLimits`).
Nothing secret is served (health, metric values, certificate names and dates), so it is plain HTTP; the
NetworkPolicy says who may reach it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httptools
import uvicorn
from fastapi import FastAPI, Response
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tls_injector.names import NAME
from tls_injector.web.health import OPERATOR_BACKLOG, Plain

log = logging.getLogger("tls_injector.operator")
Routes = Mapping[bytes, Callable[[], Plain]]


@dataclass(frozen=True)
class PortLimits:
    """How much a client may hold of the operator port; every value is about its clients: the kubelet
    (two probes every 10 s, a new connection each, 1 s timeout by default), one or two Prometheus
    servers (a scrape every 15-60 s) and now and then a person at the status page. None of them pipelines
    requests or leaves an answer unread.

    Memory, per connection, at most: one read of the socket while it is parsed (asyncio reads 256 KiB at a
    time), the head being received (`max_head_bytes`), the requests queued behind the one being answered
    (`max_pipelined`, each no more than a head), and the answers not yet taken by the client
    (`write_buffer_bytes`, plus the one answer being written when it passed the mark). So the port holds
    at most `max_connections` times that, whatever its clients do (docs/serving.md has the figure measured)."""

    # Open connections. Far above the dozen those clients hold at once; at the cap the oldest connection
    # with no request in progress is closed to make room (as the admission port does), then the one whose
    # answer has waited unread the longest, so neither a flood of idle clients nor one of clients that do
    # not read can lock out a probe that sends its request and reads its answer; with none of either, the
    # new one is closed. 64 sockets cost 64 file descriptors and a few hundred KiB.
    max_connections: int = 64
    # A connection must have the head of its next request in within this long of its start or of its
    # last answer, else it is closed: a probe sends its request at once, and a client that trickles a head
    # or says nothing is caught. A client that keeps asking (Prometheus, a probe every few seconds on a
    # kept-alive connection) is never cut off between two requests of its own.
    request_seconds: float = 5.0
    # An answer the client will not read (the socket's buffers full) is dropped, with its connection,
    # after this long; answers are built in milliseconds.
    answer_seconds: float = 60.0
    # uvicorn's own idle limit between requests on a kept-alive connection.
    keep_alive_seconds: int = 5
    # A request head (its line and fields): a probe's is ~100 bytes, Prometheus' ~300, a browser's under
    # 2 KiB. uvicorn has no limit of its own: a head that never ends grew without bound. Beyond: 431, closed.
    max_head_bytes: int = 16 * 1024
    # Requests received behind the one being answered. Its clients send one at a time; uvicorn queued
    # every request of each read (7,500 of `GET /metrics` in 256 KiB) and read on as each was answered,
    # so a client pipelining without reading grew the process by gigabytes. Beyond: the connection is
    # closed at once (a client that queues requests and does not read the answers gets none).
    max_pipelined: int = 4
    # Answers written and not yet taken by the client, above which the next one waits (asyncio's default,
    # set here so the figure above holds): a few /metrics pages.
    write_buffer_bytes: int = 64 * 1024
    # The kernel's buffers of each connection, set on the listening socket (the kernel doubles the value):
    # answers are a few KiB and requests a few hundred bytes, and the kernel's autotuning would let each
    # connection hold megabytes a client never reads, charged to the pod's memory like the process's own.
    socket_buffer_bytes: int = 64 * 1024


@dataclass
class PortStats:
    """What the guard did, for tests and the log."""

    evicted: int = 0  # closed to make room for a new connection
    refused: int = 0  # closed at once: full, and nothing idle or unread to close
    timed_out: int = 0  # no request head within request_seconds, or an answer not taken within answer_seconds
    overflowed: int = 0  # closed for a head over max_head_bytes or more than max_pipelined requests queued
    open: set[Any] = field(default_factory=set)


# The routes that answer 503 as well as 200 (tls_injector.web.health.plain_routes), as the OpenAPI schema says.
MAY_FAIL: Mapping[bytes, str] = {
    b"/healthz": "not healthy: the event loop stalled (webhook) or the reconcile loop has not come round for 90 s",
    b"/readyz": "not ready: the body says which check fails",
}


def create_app(routes: Routes, *, title: str = NAME) -> FastAPI:
    """A FastAPI app answering each route (`b"/healthz"` -> a function returning status, type, body).

    The OpenAPI schema is at /openapi.json; the interactive docs are off, since they load their scripts
    from the internet.
    """
    app = FastAPI(title=title, docs_url=None, redoc_url=None)
    for path, route in routes.items():
        responses: dict[int | str, dict[str, Any]] = {503: {"description": MAY_FAIL[path]}} if path in MAY_FAIL else {}
        app.add_api_route(path.decode(), _endpoint(route), methods=["GET"], include_in_schema=True,
                          name=path.decode().strip("/") or "root", response_class=Response, responses=responses)
    return app


def _endpoint(route: Callable[[], Plain]) -> Callable[[], Any]:
    async def endpoint() -> Response:
        status, content_type, body = route()
        return Response(content=body, status_code=status, media_type=content_type.decode())

    return endpoint


class OperatorPort:
    """Serves `app` on a socket from `tls_injector.web.health.listen` (bound first, so a port that cannot be had is
    an error before anything starts): `start()` serves from a thread of its own, `stop()` closes the
    socket and ends the thread."""

    def __init__(self, sock: socket.socket, app: FastAPI, *, limits: PortLimits | None = None) -> None:
        self.limits = limits or PortLimits()
        self.stats = PortStats()
        self.sock = sock
        # Inherited by every connection it accepts (set before the first arrives).
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, self.limits.socket_buffer_bytes)
        self.port: int = self.sock.getsockname()[1]
        # Every connection cap and timeout lives in the protocol (see _guarded_protocol); uvicorn's
        # limit_concurrency then bounds the requests in flight to one per connection the guard admits.
        config = uvicorn.Config(app, http=_guarded_protocol(self.limits, self.stats), loop="asyncio",
                                lifespan="off", log_config=None, access_log=False, server_header=False,
                                limit_concurrency=self.limits.max_connections + 1,
                                backlog=OPERATOR_BACKLOG, timeout_keep_alive=self.limits.keep_alive_seconds,
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        # uvicorn's own start and stop lines would repeat ours (below); its warnings and errors still show.
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
        self.thread = threading.Thread(target=self._run, name="operator-port", daemon=True)

    def _run(self) -> None:
        # uvicorn installs no signal handler off the main thread: SIGTERM stays the process's own.
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        log.info("operator port: health, metrics and status on plain HTTP", extra={"port": self.port})

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        self.sock.close()


class _Overflow(Exception):
    """Raised from a parser callback to stop parsing a connection that broke a limit."""


def _guarded_protocol(limits: PortLimits, stats: PortStats) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the connection cap, deadlines and memory bounds of `limits`.

    uvicorn itself keeps a connection that never sends a request (or trickles one) open for ever, counts
    connections only when a request arrives, takes a head of any size, and queues every request pipelined
    behind the one being answered; each of these is bounded here, as it comes.
    """
    opened: dict[HttpToolsProtocol, float] = {}  # insertion order: oldest first

    class Guarded(HttpToolsProtocol):
        _turned_away = False
        _timer: asyncio.TimerHandle | None = None
        idle_since = busy_since = 0.0
        stalled_since = 0.0  # when its answers last stopped being taken (writing paused)
        _in_body = False
        _head_bytes = 0  # bytes received since the head being parsed began (approximately: see data_received)
        _ending: str = ""  # why the parser was stopped: the connection is then closed, not answered 400

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(opened) >= limits.max_connections and not _make_room():
                self.transport, self._turned_away = transport, True
                stats.refused += 1
                transport.close()
                return
            super().connection_made(transport)
            transport.set_write_buffer_limits(high=limits.write_buffer_bytes)
            opened[self] = self.idle_since = self.loop.time()
            stats.open.add(self)
            self._arm(limits.request_seconds)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._turned_away:
                return
            opened.pop(self, None)
            stats.open.discard(self)
            if self._timer is not None:
                self._timer.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._ending:
                return
            # Counted as received, before the parser sees it: a head that never ends is caught whatever
            # the parser buffers meanwhile. A read that completes a head and starts the next counts only
            # towards the first (reset when it completes), so the count is exact for a head that spans
            # reads, which is the only way a head grows past one read.
            if not self._in_body:
                self._head_bytes += len(data)
            self._parse(data)
            if not self._ending and not self._in_body and self._head_bytes > limits.max_head_bytes:
                self._end("head", b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n"
                                  b"connection: close\r\n\r\n")

        def on_headers_complete(self) -> None:
            self._in_body, self._head_bytes = True, 0
            if self.cycle is not None and not self.cycle.response_complete \
                    and len(self.pipeline) >= limits.max_pipelined:
                self._end("pipelined")
                raise _Overflow  # stops the parser; see _parse
            self.busy_since = self.loop.time()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_body = False
            super().on_message_complete()

        def _parse(self, data: bytes) -> None:
            """uvicorn's data_received, except that a stop raised by a limit (the connection is already
            ended) is neither answered 400 nor logged: a flood would be a warning line per connection."""
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserCallbackError as error:
                if not isinstance(error.__context__, _Overflow):
                    self.logger.warning("Invalid HTTP request received.")
                    self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserError:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()

        def _end(self, why: str, answer: bytes = b"") -> None:
            """Stop reading and close: with `answer` written (the client sent something it may read),
            else at once, dropping what waits to be sent to a client that does not read it."""
            self._ending = why
            stats.overflowed += 1
            if answer:
                self.transport.write(answer)
                self.transport.close()
            else:
                self.transport.abort()

        def on_response_complete(self) -> None:
            self.idle_since = self.loop.time()
            super().on_response_complete()

        def pause_writing(self) -> None:
            self.stalled_since = self.loop.time()
            super().pause_writing()

        def idle(self) -> bool:
            """No request being answered: none yet, or the last one answered (a next one may be arriving)."""
            return self.cycle is None or self.cycle.response_complete

        def stalled(self) -> bool:
            """Its answers are not being taken: the client stopped reading."""
            return bool(self.flow is not None and self.flow.write_paused)

        def _arm(self, delay: float) -> None:
            self._timer = self.loop.call_later(max(delay, 0.01), self._deadline)

        def _deadline(self) -> None:
            waiting = self.idle() and not self.stalled()  # for a request, else for the client to read
            if waiting:
                left = self.idle_since + limits.request_seconds - self.loop.time()
            else:
                left = max(self.busy_since, self.stalled_since) + limits.answer_seconds - self.loop.time()
            if left > 0:
                self._arm(left)
                return
            stats.timed_out += 1
            if waiting:
                self.transport.close()
            else:
                self.transport.abort()  # a close would wait for ever to send what the client does not read

    def _make_room() -> bool:
        """Close the connection idle the longest (a silent client before a kept-alive one that just asked),
        else the one whose answers have waited unread the longest; False when every one is being served."""
        idle = [c for c in opened if c.idle() and not c.stalled()]  # type: ignore[attr-defined]
        stalled = [c for c in opened if c.stalled()]  # type: ignore[attr-defined]
        if idle:
            victim = min(idle, key=lambda c: c.idle_since)  # type: ignore[attr-defined]
            victim.transport.close()
        elif stalled:
            victim = min(stalled, key=lambda c: c.stalled_since)  # type: ignore[attr-defined]
            victim.transport.abort()  # a close would wait for the client to read
        else:
            return False
        opened.pop(victim)
        stats.evicted += 1
        return True

    return Guarded
