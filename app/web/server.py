"""Running the HTTPS server: uvicorn with a reloading TLS context and a graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import uvicorn

from app.admission import Handler
from app.settings import ServeSettings
from app.web.app import BackgroundTask, Health, create_app
from app.web.metrics import ServerMetrics
from app.web.selfsigned import write_self_signed
from app.web.tls import CertReloader, LoadedPair

log = logging.getLogger("tls_injector.server")


def build_server(
    settings: ServeSettings,
    *,
    mutate: Handler,
    validate: Handler,
    validate_enabled_namespace: Handler | None = None,
    metrics: ServerMetrics | None = None,
    background: Sequence[BackgroundTask] = (),
    health: Health | None = None,
) -> uvicorn.Server:
    """Everything wired, nothing started: `.run()` serves until SIGTERM/SIGINT."""
    metrics = metrics or ServerMetrics()
    health = health or Health()
    reloader = _reloader(settings, metrics)
    health.certificate_loaded = True

    async def poll_certificates() -> None:
        while True:
            await asyncio.sleep(settings.reload_interval_seconds)
            reloader.poll()

    app = create_app(mutate=mutate, validate=validate, validate_enabled_namespace=validate_enabled_namespace,
                     metrics=metrics, health=health,
                     background=[poll_certificates, *background])
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        ssl_context_factory=lambda _config, _default: reloader.listening_context(),
        log_config=None,
        access_log=False,  # one structured line per admission call is logged by the endpoint instead
        timeout_graceful_shutdown=settings.drain_seconds,
        lifespan="on",
        # The apiserver calls the webhook directly: no proxy headers to trust, and no need to name the
        # server software in every response.
        proxy_headers=False,
        server_header=False,
    )
    return DrainingServer(config)


class DrainingServer(uvicorn.Server):
    """uvicorn's graceful shutdown, minus the wait on idle kept-alive TLS connections.

    On SIGTERM uvicorn stops listening, lets in-flight requests finish (answering them with
    `Connection: close`) and closes idle connections. Closing a TLS connection politely waits for the
    peer's close_notify, which an idle pooled client (the apiserver keeps its connections alive) never
    sends, so shutdown would hang for the whole drain period. Idle connections that are already closing
    are aborted instead; connections with a request in flight are left to finish.
    """

    async def _wait_tasks_to_complete(self) -> None:
        while self.server_state.connections and not self.force_exit:
            for connection in list(self.server_state.connections):
                if _idle_and_closing(connection):
                    connection.transport.abort()
            await asyncio.sleep(0.05)
        await super()._wait_tasks_to_complete()


def _idle_and_closing(connection: object) -> bool:
    transport = getattr(connection, "transport", None)
    cycle = getattr(connection, "cycle", None)
    idle = cycle is None or getattr(cycle, "response_complete", False)
    return transport is not None and transport.is_closing() and idle


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
