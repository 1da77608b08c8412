"""The ASGI application: admission endpoints on the fast path, FastAPI for everything else."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse

from app.admission import Handler
from app.web.admission_asgi import MAX_BODY_BYTES, AdmissionEndpoint, Receive, Scope, Send
from app.web.metrics import ServerMetrics

BackgroundTask = Callable[[], Coroutine[Any, Any, None]]


def _unknown() -> bool | None:
    return None


@dataclass
class Health:
    """What /readyz reports: ready once a certificate is loaded and the server is not shutting down, and,
    when the reconciler runs in this process, unless its last pass found that the live caBundle does not
    trust the certificate served here (None: not known, which does not hold readiness back)."""

    certificate_loaded: bool = False
    shutting_down: bool = False
    serving_trusted: Callable[[], bool | None] = _unknown

    @property
    def ready(self) -> bool:
        return self.certificate_loaded and not self.shutting_down and self.serving_trusted() is not False


class AdmissionApp:
    """Routes POST /mutate, /validate and /validate/enabled-namespace straight to their endpoints; the
    rest goes to FastAPI."""

    def __init__(self, routes: dict[str, AdmissionEndpoint], fallback: FastAPI) -> None:
        self.routes, self.fallback = routes, fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await self.fallback(scope, receive, send)
        else:
            await endpoint(scope, receive, send)


def create_app(
    *,
    mutate: Handler,
    validate: Handler,
    metrics: ServerMetrics,
    validate_enabled_namespace: Handler | None = None,
    health: Health,
    background: Sequence[BackgroundTask] = (),
    max_body: int = MAX_BODY_BYTES,
) -> AdmissionApp:
    """Build the app; `background` tasks run for the server's lifetime and are cancelled at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(task()) for task in background]
        yield
        health.shutting_down = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    api = FastAPI(title="tls-injector", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz() -> JSONResponse:
        body = {"ready": health.ready, "certificate_loaded": health.certificate_loaded,
                "shutting_down": health.shutting_down, "ca_bundle_trusts_serving_cert": health.serving_trusted()}
        return JSONResponse(body, status_code=200 if health.ready else 503)

    @api.get("/metrics")
    async def metrics_endpoint() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # /validate/enabled-namespace is served only when given a handler: its rules differ from /validate's,
    # and a 404 fails closed (failurePolicy Fail) where a stand-in would judge with the wrong rules.
    handlers = {"mutate": mutate, "validate": validate, "validate/enabled-namespace": validate_enabled_namespace}
    endpoints = {
        f"/{name}": AdmissionEndpoint(name=name, handler=handler, metrics=metrics, max_body=max_body)
        for name, handler in handlers.items() if handler is not None
    }
    return AdmissionApp(endpoints, api)
