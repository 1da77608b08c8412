"""The admission endpoints as plain ASGI apps: HTTP concerns only, the protocol is app.admission.

Plain ASGI rather than a FastAPI route because the request path is the product: measured here with a
5 KB review over TLS, FastAPI with a dict body reaches ~2,900 req/s on a core and raw ASGI + orjson
~10,600. The body is read with a cap as it arrives, never buffered whole first.

Two error channels, chosen on purpose:
- A malformed call (wrong method or content type, oversize, empty, invalid JSON, not an AdmissionReview)
  is an HTTP 4xx with a JSON error and no stack trace; the apiserver then applies the webhook's
  failurePolicy, which is where the operator has said what an unusable call should mean.
- A bug inside a handler is an HTTP 500 for the same reason: an outage of our logic, not a policy
  verdict, so `failurePolicy` decides (Fail: the request is refused; Ignore: it goes through
  unmutated) instead of the webhook silently denying every pod. The traceback goes to the log only.
Policy rejections are HTTP 200 with allowed=false, built by the handlers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from app.admission import AdmissionRequest, AdmissionResponse, BadReview, Handler, parse_review, review_envelope
from app.logs import AccessLog
from app.web.metrics import ServerMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# An AdmissionReview carries the object and its old version, each up to the apiserver's 3 MiB request
# limit, plus the envelope: 7 MiB admits every real review and refuses anything larger before parsing.
MAX_BODY_BYTES = 7 * 1024 * 1024

log = logging.getLogger("tls_injector.admission")


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class AdmissionEndpoint:
    def __init__(
        self, *, name: str, handler: Handler, metrics: ServerMetrics, max_body: int = MAX_BODY_BYTES
    ) -> None:
        self.name, self.handler, self.metrics, self.max_body = name, handler, metrics, max_body
        self.access_log = AccessLog(log.name)  # the level is read once, after logging is configured

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        try:
            request = _parse(await self._read(scope, receive))
        except HttpError as error:
            await self._refuse(send, error, started)
            return
        try:
            response = self.handler(request)
        except Exception:  # a bug in a handler: see the module docstring for why this is a 500
            log.exception("admission handler failed", extra=_fields(self.name, request))
            await _send_json(send, 500, {"error": "internal error while handling the review", "uid": request.uid})
            self.metrics.observe(self.name, "error", time.perf_counter() - started)
            return
        await _send_json(send, 200, review_envelope(response))
        self._record(request, response, started)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        if scope["method"] != "POST":
            raise HttpError(405, "use POST", ((b"allow", b"POST"),))
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if content_type != b"application/json":
            raise HttpError(415, "Content-Type must be application/json")
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            raise HttpError(413 if declared.isdigit() else 400, "body larger than the limit or invalid length")
        return await _read_capped(receive, self.max_body)

    async def _refuse(self, send: Send, error: HttpError, started: float) -> None:
        log.warning("refused a malformed admission call", extra={"endpoint": self.name, "status": error.status,
                                                                 "reason": error.message})
        await _send_json(send, error.status, {"error": error.message}, error.headers)
        self.metrics.observe(self.name, "bad_request", time.perf_counter() - started)

    def _record(self, request: AdmissionRequest, response: AdmissionResponse, started: float) -> None:
        elapsed = time.perf_counter() - started
        outcome = ("patched" if "patch" in response else "allowed") if response["allowed"] else "denied"
        self.metrics.observe(self.name, outcome, elapsed)
        fields = {**_fields(self.name, request), "verdict": outcome, "latency_ms": round(elapsed * 1000, 3)}
        self.access_log.info("admission", fields)


def _parse(body: bytes) -> AdmissionRequest:
    if not body:
        raise HttpError(400, "empty body: expected an AdmissionReview")
    try:
        decoded = orjson.loads(body)  # orjson refuses nesting deeper than 1024 levels with a decode error
    except orjson.JSONDecodeError as error:
        raise HttpError(400, f"invalid JSON: {error}") from None
    try:
        return parse_review(decoded)
    except BadReview as error:
        raise HttpError(400, f"not a valid AdmissionReview: {error}") from None


async def _read_capped(receive: Receive, cap: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(400, "client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise HttpError(413, f"body larger than {cap} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _fields(endpoint: str, request: AdmissionRequest) -> dict[str, object]:
    return {
        "endpoint": endpoint,
        "uid": request.uid,
        "kind": request.kind["kind"],
        "namespace": request.namespace,
        "object_name": request.name,
        "operation": request.operation,
        "dry_run": request.dry_run,
    }


async def _send_json(
    send: Send, status: int, payload: object, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = orjson.dumps(payload)
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": body})

