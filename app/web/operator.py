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

import uvicorn
from fastapi import FastAPI, Response
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.names import NAME
from app.web.health import OPERATOR_BACKLOG, Plain

log = logging.getLogger("tls_injector.operator")
Routes = Mapping[bytes, Callable[[], Plain]]


@dataclass(frozen=True)
class PortLimits:
    """How much a client may hold of the operator port; every value is about its clients: the kubelet
    (two probes every 10 s, a new connection each, 1 s timeout by default), one or two Prometheus
    servers (a scrape every 15-60 s) and now and then a person at the status page."""

    # Open connections. Far above the dozen those clients hold at once; at the cap the oldest connection
    # with no request in progress is closed to make room (as the admission port does), so a flood of
    # idle clients cannot lock out a probe that sends its request at once; with none idle, the new one is
    # closed. 64 sockets cost 64 file descriptors and a few hundred KiB.
    max_connections: int = 64
    # A connection must have the head of its next request in within this long of its start or of its
    # last answer, else it is closed: a probe sends its request at once, and a client that trickles a head
    # or says nothing is caught. A client that keeps asking (Prometheus, a probe every few seconds on a
    # kept-alive connection) is never cut off between two requests of its own.
    request_seconds: float = 5.0
    # An answer the client will not read (the socket's buffers full) is dropped after this long; answers
    # are built in milliseconds.
    answer_seconds: float = 60.0
    # uvicorn's own idle limit between requests on a kept-alive connection.
    keep_alive_seconds: int = 5


@dataclass
class PortStats:
    """What the guard did, for tests and the log."""

    evicted: int = 0  # closed to make room for a new connection
    refused: int = 0  # closed at once: full, and nothing idle to close
    timed_out: int = 0  # no request head within request_seconds, or an answer not taken within answer_seconds
    open: set[Any] = field(default_factory=set)


# The routes that answer 503 as well as 200 (app.web.health.plain_routes), as the OpenAPI schema says.
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
    """Serves `app` on a socket from `app.web.health.listen` (bound first, so a port that cannot be had is
    an error before anything starts): `start()` serves from a thread of its own, `stop()` closes the
    socket and ends the thread."""

    def __init__(self, sock: socket.socket, app: FastAPI, *, limits: PortLimits | None = None) -> None:
        self.limits = limits or PortLimits()
        self.stats = PortStats()
        self.sock = sock
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


def _guarded_protocol(limits: PortLimits, stats: PortStats) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the connection cap and deadlines of `limits`.

    uvicorn itself keeps a connection that never sends a request (or trickles one) open for ever, and
    counts connections only when a request arrives; both are closed here, as they come.
    """
    opened: dict[HttpToolsProtocol, float] = {}  # insertion order: oldest first

    class Guarded(HttpToolsProtocol):
        _turned_away = False
        _timer: asyncio.TimerHandle | None = None
        idle_since = busy_since = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(opened) >= limits.max_connections and not _make_room():
                self.transport, self._turned_away = transport, True
                stats.refused += 1
                transport.close()
                return
            super().connection_made(transport)
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

        def on_headers_complete(self) -> None:
            self.busy_since = self.loop.time()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            self.idle_since = self.loop.time()
            super().on_response_complete()

        def idle(self) -> bool:
            """No request being answered: none yet, or the last one answered (a next one may be arriving)."""
            return self.cycle is None or self.cycle.response_complete

        def _arm(self, delay: float) -> None:
            self._timer = self.loop.call_later(max(delay, 0.01), self._deadline)

        def _deadline(self) -> None:
            if self.idle():
                left = self.idle_since + limits.request_seconds - self.loop.time()
            else:
                left = self.busy_since + limits.answer_seconds - self.loop.time()
            if left > 0:
                self._arm(left)
                return
            stats.timed_out += 1
            self.transport.close()

    def _make_room() -> bool:
        """Close the connection idle the longest (a silent client before a kept-alive one that just asked)."""
        idle = [c for c in opened if c.idle()]  # type: ignore[attr-defined]
        if not idle:
            return False
        longest = min(idle, key=lambda c: c.idle_since)  # type: ignore[attr-defined]
        opened.pop(longest)
        stats.evicted += 1
        longest.transport.close()
        return True

    return Guarded
