"""The admission endpoints' HTTP semantics, independent of the connection that carries them.

`answer()` takes what the HTTP layer parsed (method, content type, body) and returns the status and the
JSON body to send; the transport in tls_injector.web.http does the bytes. The protocol itself is tls_injector.admission.

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
from typing import Any

import orjson

from tls_injector.admission import BadReview, Request, Route, clip, review_envelope
from tls_injector.logs import AccessLog
from tls_injector.settings import MAX_BODY_BYTES
from tls_injector.web.metrics import ServerMetrics

log = logging.getLogger("tls_injector.admission")

Headers = tuple[tuple[bytes, bytes], ...]
JSON_TYPE = b"application/json"
_clock = time.perf_counter


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: Headers = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class AdmissionEndpoint:
    """One endpoint's one path: the body decoded once by its route, handled once, the answer encoded once."""

    def __init__(
        self, *, name: str, route: Route[Any], metrics: ServerMetrics, max_body: int = MAX_BODY_BYTES
    ) -> None:
        self.name, self.route, self.metrics, self.max_body = name, route, metrics, max_body
        self.access_log = AccessLog(log.name)  # the level is read once, after logging is configured

    def answer(self, method: bytes, content_type: bytes, body: bytes) -> tuple[int, bytes, Headers]:
        """(status, JSON body, extra headers) for one call; never raises."""
        started = _clock()
        try:
            if method != b"POST" or content_type != JSON_TYPE:  # the head every client sends, without a call
                check_call(method, content_type)
            if not body:
                raise HttpError(400, "empty body: expected an AdmissionReview")
            request = self.route.decode(body)
        except HttpError as error:
            return self.refuse(error, started)
        except BadReview as error:
            return self.refuse(HttpError(400, str(error)), started)
        try:
            response = self.route.handle(request)
        except BadReview as error:  # a part decoded only when the handler reads it (a spec, a rule's value)
            return self.refuse(HttpError(400, str(error)), started)
        except Exception:  # a bug in a handler: see the module docstring for why this is a 500
            return self._failed(_fields(self.name, request), request.uid, started)
        encoded = orjson.dumps(review_envelope(response))
        elapsed = _clock() - started
        outcome = ("patched" if "patch" in response else "allowed") if response["allowed"] else "denied"
        self.metrics.observe(self.name, outcome, elapsed)
        if self.access_log.enabled:  # the line's fields are gathered only for a line that is written
            fields = _fields(self.name, request)
            # The latency to the microsecond: round() to an integer and a division cost half what
            # round(x, 3) does, for the same value.
            fields["verdict"], fields["latency_ms"] = outcome, round(elapsed * 1e6) / 1e3
            self.access_log.info("admission", fields)
        return 200, encoded, ()

    def _failed(self, fields: dict[str, object], uid: str, started: float) -> tuple[int, bytes, Headers]:
        log.exception("admission handler failed", extra=fields)
        self.metrics.observe(self.name, "error", _clock() - started)
        return 500, orjson.dumps({"error": "internal error while handling the review", "uid": uid}), ()

    def refuse(self, error: HttpError, started: float | None = None) -> tuple[int, bytes, Headers]:
        log.warning("refused a malformed admission call", extra={"endpoint": self.name, "status": error.status,
                                                                 "reason": error.message})
        elapsed = 0.0 if started is None else _clock() - started
        self.metrics.observe(self.name, "bad_request", elapsed)
        return error.status, orjson.dumps({"error": error.message}), error.headers


def check_call(method: bytes, content_type: bytes) -> None:
    """What can be refused from the head alone, before any body is read."""
    if method != b"POST":
        raise HttpError(405, "use POST", ((b"allow", b"POST"),))
    if content_type != JSON_TYPE and content_type.split(b";")[0].strip().lower() != b"application/json":
        raise HttpError(415, "Content-Type must be application/json")


def _fields(endpoint: str, request: Request) -> dict[str, object]:
    """An admission call's access-log and error-log fields (the access line adds its verdict and latency)."""
    # The name and namespace as sent, which may be far past any legal one (review.MAX_SENT_NAME_LENGTH): clipped.
    return {"endpoint": endpoint, "uid": request.uid, "kind": request.kind.kind,
            "namespace": clip(request.namespace or ""), "object_name": clip(request.name or ""),
            "operation": request.operation, "dry_run": bool(request.dryRun)}
