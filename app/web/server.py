"""Running the webhook: the HTTPS admission listener on uvloop, the probe port, reload and drain.

Lifecycle: listen (TLS context whose SNI callback serves the current certificate), start the
background tasks (certificate poll, the sweeper that enforces deadlines and beats the heartbeat, and
whatever the caller runs, e.g. the reconciler), serve until SIGTERM/SIGINT, then drain:
stop listening (new connections are refused, so the apiserver tries another endpoint), answer every
request from then on with `Connection: close`, close kept-alive connections once idle for
DRAIN_IDLE_SECONDS, let requests in flight finish for at most the drain period, then close what is left.
SIGHUP re-reads the certificate files now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import uvloop

from tls_injector.admission import Route
from tls_injector.logs import flush_access_lines
from tls_injector.settings import Limits, ServeSettings
from tls_injector.web.answers import Clock
from tls_injector.web.connections import ConnectionSet
from tls_injector.web.endpoints import AdmissionEndpoint
from tls_injector.web.health import BackgroundTask, Health, listen, plain_routes, webhook_probes
from tls_injector.web.heap import HeapTrim, fix_malloc_thresholds
from tls_injector.web.http import SOCKET_BUFFER_BYTES, HttpConnection, Routes
from tls_injector.web.metrics import ServerMetrics
from tls_injector.web.selfsigned import write_self_signed
from tls_injector.web.tls import CertReloader, LoadedPair
from tls_injector.web.workers import WorkerSlot

if TYPE_CHECKING:
    from tls_injector.web.operator import OperatorPort

log = logging.getLogger("tls_injector.server")

# The kernel's accept queue; Linux caps it at net.core.somaxconn (4096 on current kernels).
BACKLOG = 1024
# While draining, a kept-alive connection is closed once idle this long (tls_injector.web.connections.ConnectionSet.
# close_idle): the apiserver, sending about one review per 50 ms to a busy replica, uses a connection it
# is about to use again within that time and gets `Connection: close` with its answer instead of a race
# with our close; a quiet cluster's connections are closed after 2 s, well inside the drain period.
DRAIN_IDLE_SECONDS = 2.0
# Closing a TLS connection sends close_notify and waits for the peer's; a peer that never answers is
# dropped after this long.
TLS_SHUTDOWN_SECONDS = 2.0


def build_server(
    settings: ServeSettings,
    *,
    mutate: Route[Any],
    validate: Route[Any],
    validate_enabled_namespace: Route[Any] | None = None,
    metrics: ServerMetrics | None = None,
    background: Sequence[BackgroundTask] = (),
    health: Health | None = None,
    limits: Limits | None = None,
    worker: WorkerSlot | None = None,
) -> WebhookServer:
    """Everything wired, nothing started: `.run()` serves until SIGTERM/SIGINT or `.stop()`."""
    metrics = metrics or ServerMetrics()
    limits = limits or Limits()
    health = health or Health()
    reloader = _reloader(settings, metrics)
    health.certificate_loaded = True
    # /validate/enabled-namespace is served only when given a handler: its rules differ from /validate's,
    # and a 404 fails closed (failurePolicy Fail) where a stand-in would judge with the wrong rules.
    handlers = {"mutate": mutate, "validate": validate, "validate/enabled-namespace": validate_enabled_namespace}
    endpoints = {
        f"/{name}".encode(): AdmissionEndpoint(name=name, route=route, metrics=metrics,
                                               max_body=limits.max_body_bytes)
        for name, route in handlers.items() if route is not None
    }
    routes = Routes(admission=endpoints, plain=plain_routes(webhook_probes(health, metrics)))
    return WebhookServer(settings, limits=limits, routes=routes, metrics=metrics, health=health,
                         reloader=reloader, background=background, worker=worker)


class WebhookServer:
    def __init__(self, settings: ServeSettings, *, limits: Limits, routes: Routes, metrics: ServerMetrics,
                 health: Health, reloader: CertReloader, background: Sequence[BackgroundTask],
                 worker: WorkerSlot | None = None) -> None:
        self.settings, self.limits, self.routes, self.metrics = settings, limits, routes, metrics
        self.health, self.reloader, self.background, self.worker = health, reloader, background, worker
        self.connections = ConnectionSet(limits, metrics)
        if metrics.shared_dir is None:
            metrics.connections_open.set_function(lambda: len(self.connections.open))
        # The probe port is the operator port (tls_injector.web.operator), in a thread of its own. A worker of
        # `serve --workers N` opens none: its supervisor serves the probe port.
        self.probes = (_operator_port(settings.host, settings.probe_port, routes)
                       if settings.probe_port is not None and worker is None else None)
        self.started = False
        # Called once the port is open and every task runs (the CLI then writes the log lines it held).
        self.on_started: Callable[[], None] | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def run(self) -> None:
        raise_open_files_limit()
        fix_malloc_thresholds()
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self.serve())

    def stop(self) -> None:
        """Begin the drain; callable from any thread."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._stop = loop, asyncio.Event()
        where: dict[str, Any] = ({"sock": self.worker.listening_socket()} if self.worker is not None else
                                 {"host": self.settings.host, "port": self.settings.port, "backlog": BACKLOG})
        listener = await loop.create_server(
            lambda: HttpConnection(self.connections, self.routes),
            ssl=self.reloader.listening_context(), ssl_handshake_timeout=self.limits.handshake_seconds,
            ssl_shutdown_timeout=TLS_SHUTDOWN_SECONDS, **where,
        )
        self.port = listener.sockets[0].getsockname()[1]
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):  # inherited by every connection it accepts
            listener.sockets[0].setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        self._install_signals(loop)
        tasks = [asyncio.create_task(task()) for task in (self._tick, self._poll_certificates, *self.background)]
        if self.probes is not None:
            self.probes.start()
        self.started = True
        if self.on_started is not None:
            self.on_started()
        try:
            await self._stop.wait()
        finally:
            await self._drain(listener)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.probes is not None:
                self.probes.stop()

    async def _drain(self, listener: asyncio.Server) -> None:
        self.health.shutting_down = True
        listener.close()
        self.connections.drain()
        deadline = time.monotonic() + self.settings.drain_seconds
        while self.connections.open and time.monotonic() < deadline:
            self.connections.close_idle(time.monotonic(), DRAIN_IDLE_SECONDS)
            await asyncio.sleep(0.05)
        for connection in list(self.connections.open):
            connection.abort("shutdown")
        log.info("drained", extra={"left_open": len(self.connections.open)})  # also writes the access lines

    async def _tick(self) -> None:
        """Enforce connection deadlines, refresh the Date header, write the access lines gathered (tls_injector.logs),
        and beat the heartbeat /healthz reads."""
        interval = self.limits.tick_seconds
        heap = HeapTrim()
        while True:
            now = time.monotonic()
            self.health.heartbeat = now
            Clock.tick()
            self.connections.sweep(now)
            flush_access_lines()
            heap.tick(now, self.connections.closed)
            if self.worker is not None:
                self.metrics.connections_open.set(len(self.connections.open))
                self.worker.beat(self.health)
                if self.worker.orphaned() and self._stop is not None:
                    log.warning("the supervisor is gone: draining and exiting")
                    self._stop.set()
            await asyncio.sleep(interval)

    async def _poll_certificates(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_interval_seconds)
            self.reloader.poll()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # embedded (tests): the owner calls stop()
        assert self._stop is not None
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_now)

    def _reload_now(self) -> None:
        log.info("SIGHUP: re-reading the serving certificate")
        self.reloader.poll()


def raise_open_files_limit() -> None:
    """Every connection is a file descriptor: use all the container allows (soft limit up to hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _operator_port(host: str, port: int, routes: Routes) -> OperatorPort:
    # Imported here: FastAPI and uvicorn take most of a second of CPU to import, and the workers of
    # `serve --workers N` (which open no probe port) would pay it on every start and restart.
    from tls_injector.web.operator import OperatorPort, create_app  # noqa: PLC0415

    return OperatorPort(listen(host, port), create_app(routes.plain))


def _reloader(settings: ServeSettings, metrics: ServerMetrics) -> CertReloader:
    def on_reload(ok: bool, pair: LoadedPair | None) -> None:
        metrics.reloads.labels("success" if ok else "failure").inc()
        if pair is not None:
            metrics.cert_expiry.set(pair.not_after.timestamp())

    if settings.tls_cert_file and settings.tls_private_key_file:
        reloader = CertReloader(settings.tls_cert_file, settings.tls_private_key_file, on_reload=on_reload)
    else:
        files = write_self_signed(settings.self_signed_dir, now=datetime.now(UTC))
        log.warning("no certificate given: serving a self-signed one; clients must trust the CA file",
                    extra={"ca_file": str(files.ca_file), "cert_file": str(files.cert_file)})
        print(f"tls-injector: self-signed CA written to {files.ca_file}", flush=True)
        reloader = CertReloader(files.cert_file, files.key_file, on_reload=on_reload)
    metrics.cert_expiry.set(reloader.current.not_after.timestamp())
    return reloader
