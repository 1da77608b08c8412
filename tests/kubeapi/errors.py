"""API errors as the real API reports them: a ``Status`` object with reason, code, message and details.

Messages follow the apiserver's wording (``secrets "x" not found``, ``Operation cannot be fulfilled on
...``) so that code matching on them, or a person reading a log, sees what a cluster would say.
"""

from __future__ import annotations

from typing import Any

from tests.kubeapi.resources import Resource

# Reasons for codes a fault can inject with no better context (metav1.StatusReason values).
REASON_BY_CODE = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


class ApiError(Exception):
    """An error answer: raised anywhere in the emulator, turned into a Status response by the server."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if not self.reason:  # metav1.StatusReasonUnknown is "", left out of the JSON (omitempty)
            del body["reason"]
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(res: Resource, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": res.plural}
    if res.group:
        details["group"] = res.group
    return details


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))


def conflict(res: Resource, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
                    _details(res, name))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(res: Resource, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; each cause is (reason, field, message), e.g. ("FieldValueRequired", "data[tls.crt]", ...)."""
    text = ", ".join(f"{field}: {message}" for _, field, message in causes)
    details: dict[str, Any] = {
        "name": name, "kind": res.kind,
        "causes": [{"reason": r, "field": f, "message": m} for r, f, m in causes],
    }
    if res.group:
        details["group"] = res.group
    return ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"})


def injected(code: int, message: str) -> ApiError:
    return ApiError(code, REASON_BY_CODE.get(code, "InternalError"), message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


# The apiserver's two size limits on a write (each with its source, as the figures are not in the API
# reference): the request body, 3 MiB (MaxRequestBodyBytes, k8s.io/apiserver/pkg/server/config.go: twice
# etcd's default, as JSON is larger than the protobuf stored), answered 413 RequestEntityTooLarge
# "Request entity too large: limit is 3145728" (kubernetes/kubernetes#105863); and the stored object,
# refused by etcd past its --max-request-bytes, 1.5 MiB by default (etcd.io/docs/v3.4/dev-guide/limit,
# etcd-io/etcd#7968), which kube-apiserver passes on as a 500 whose message is etcd's own, "etcdserver:
# request is too large", not a Status reason of its own (kubernetes/kubernetes#74600, still so in #112152).
MAX_REQUEST_BODY = 3 * 1024 * 1024
MAX_STORED_OBJECT = 1024 * 1024 + 512 * 1024


def body_too_large() -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_REQUEST_BODY}")


def too_large_to_store() -> ApiError:
    return ApiError(500, "", "etcdserver: request is too large")
