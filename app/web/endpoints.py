"""The admission endpoints' HTTP semantics, independent of the connection that carries them.

`answer()` takes what the HTTP layer parsed (method, content type, body) and returns the status and the
JSON body to send; the transport in app.web.http does the bytes. The protocol itself is app.admission.

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
from collections.abc import Callable
from typing import NamedTuple, Protocol

import orjson

from app.admission import AdmissionRequest, AdmissionResponse, BadReview, Handler, parse_review, review_envelope
from app.admission.quick import Envelope
from app.injection.quick import PodReview
from app.logs import AccessLog
from app.settings import MAX_BODY_BYTES
from app.web.metrics import ServerMetrics

log = logging.getLogger("tls_injector.admission")

Headers = tuple[tuple[bytes, bytes], ...]


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: Headers = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class QuickPath(Protocol):
    """A way to answer some reviews from the body alone (app.injection.quick), tried before the full path."""

    def pod_review(self, body: bytes) -> PodReview | None: ...
    def answer(self, review: PodReview) -> AdmissionResponse | None: ...
    def make(self, review: PodReview) -> AdmissionResponse | None: ...


QuickAnswer = Callable[[bytes], "tuple[Envelope, AdmissionResponse] | None"]


class Quick(NamedTuple):
    """A quick path's answer and the access log's fields for it."""

    fields: dict[str, object]
    response: AdmissionResponse


class AdmissionEndpoint:
    def __init__(
        self, *, name: str, handler: Handler, metrics: ServerMetrics, max_body: int = MAX_BODY_BYTES
    ) -> None:
        self.name, self.handler, self.metrics, self.max_body = name, handler, metrics, max_body
        self.access_log = AccessLog(log.name)  # the level is read once, after logging is configured
        # /mutate's handler brings its quick path along (app.injection.mutate).
        self.quick: QuickPath | None = getattr(handler, "quick", None)
        # /validate's handler brings its own (app.rules.quick): the whole answer, or None.
        self.quick_answer: QuickAnswer | None = getattr(handler, "quick_answer", None)

    def answer(self, method: bytes, content_type: bytes, body: bytes) -> tuple[int, bytes, Headers]:
        """(status, JSON body, extra headers) for one call; never raises."""
        started = time.perf_counter()
        try:
            check_call(method, content_type)
        except HttpError as error:
            return self.refuse(error, started)
        try:
            quick = self._quickly(body, started)
        except Exception:  # a bug in a quick path: the full path still answers (and gives its own 500)
            log.exception("quick path failed; the full path answers", extra={"endpoint": self.name})
            quick = None
        if isinstance(quick, Quick):
            encoded = orjson.dumps(review_envelope(quick.response))
            self._record(quick.fields, quick.response, started)
            return 200, encoded, ()
        if quick is not None:  # a 500 from the handler's plan, already logged and counted
            return quick
        try:
            request = _parse(body)
        except HttpError as error:
            return self.refuse(error, started)
        try:
            response = self.handler(request)
        except Exception:  # a bug in a handler: see the module docstring for why this is a 500
            return self._failed(_fields(self.name, request), request.uid, started)
        encoded = orjson.dumps(review_envelope(response))
        self._record(_fields(self.name, request), response, started)
        return 200, encoded, ()

    def _quickly(self, body: bytes, started: float) -> Quick | tuple[int, bytes, Headers] | None:
        """The answer when a quick path can give it (the same as the full path's), or the 500 for a bug in
        the handler's plan reached through it; None when only the full path may answer."""
        if self.quick_answer is not None:
            found = self.quick_answer(body)
            if found is None:
                return None
            envelope, response = found
            return Quick(_envelope_fields(self.name, envelope), response)
        if self.quick is not None:
            pod = self.quick.pod_review(body)
            if pod is None:
                return None
            fields = _pod_fields(self.name, pod)
            try:
                made = self.quick.answer(pod) or self.quick.make(pod)
            except Exception:  # a bug in the handler's plan: as for the full path's handler
                return self._failed(fields, pod.uid, started)
            return None if made is None else Quick(fields, made)
        return None

    def _failed(self, fields: dict[str, object], uid: str, started: float) -> tuple[int, bytes, Headers]:
        log.exception("admission handler failed", extra=fields)
        self.metrics.observe(self.name, "error", time.perf_counter() - started)
        return 500, orjson.dumps({"error": "internal error while handling the review", "uid": uid}), ()

    def refuse(self, error: HttpError, started: float | None = None) -> tuple[int, bytes, Headers]:
        log.warning("refused a malformed admission call", extra={"endpoint": self.name, "status": error.status,
                                                                 "reason": error.message})
        elapsed = 0.0 if started is None else time.perf_counter() - started
        self.metrics.observe(self.name, "bad_request", elapsed)
        return error.status, orjson.dumps({"error": error.message}), error.headers

    def _record(self, fields: dict[str, object], response: AdmissionResponse, started: float) -> None:
        elapsed = time.perf_counter() - started
        outcome = ("patched" if "patch" in response else "allowed") if response["allowed"] else "denied"
        self.metrics.observe(self.name, outcome, elapsed)
        fields.update(verdict=outcome, latency_ms=round(elapsed * 1000, 3))
        self.access_log.info("admission", fields)


def check_call(method: bytes, content_type: bytes) -> None:
    """What can be refused from the head alone, before any body is read."""
    if method != b"POST":
        raise HttpError(405, "use POST", ((b"allow", b"POST"),))
    if content_type.split(b";")[0].strip().lower() != b"application/json":
        raise HttpError(415, "Content-Type must be application/json")


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


def _pod_fields(endpoint: str, pod: PodReview) -> dict[str, object]:
    """The same fields as `_fields` gives for the full path's request of a Pod CREATE."""
    return _log_fields(endpoint, uid=pod.uid, kind="Pod", namespace=pod.namespace, name=pod.name,
                       operation="CREATE", dry_run=pod.dry_run)


def _envelope_fields(endpoint: str, envelope: Envelope) -> dict[str, object]:
    return _log_fields(endpoint, uid=envelope.uid, kind=envelope.kind, namespace=envelope.namespace,
                       name=envelope.name, operation=envelope.operation, dry_run=envelope.dry_run)


def _fields(endpoint: str, request: AdmissionRequest) -> dict[str, object]:
    return _log_fields(endpoint, uid=request.uid, kind=request.kind["kind"], namespace=request.namespace,
                       name=request.name, operation=request.operation, dry_run=request.dry_run)


def _log_fields(endpoint: str, *, uid: str, kind: str, namespace: str, name: str, operation: str,
                dry_run: bool) -> dict[str, object]:
    """An admission call's access-log and error-log fields, whichever path answered it."""
    return {"endpoint": endpoint, "uid": uid, "kind": kind, "namespace": namespace, "object_name": name,
            "operation": operation, "dry_run": dry_run}
