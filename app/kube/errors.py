"""Errors of the Kubernetes API as types: callers branch on the class, never on a status number."""

from __future__ import annotations

import orjson


class KubeError(Exception):
    """Any failed call to the Kubernetes API."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """404: the object (or its namespace) does not exist — a confirmed absence."""


class Conflict(KubeError):
    """409 on a write whose resourceVersion precondition is stale: re-read and re-plan."""


class AlreadyExists(Conflict):
    """409 on create: someone else created the object first; re-read it."""


class Forbidden(KubeError):
    """403: RBAC does not allow this; retrying will not help."""


class Unauthorized(KubeError):
    """401: credentials missing or expired."""


class Invalid(KubeError):
    """422 (or 400): the API server rejected the object itself."""


class Gone(KubeError):
    """410: the resourceVersion a watch started from is too old; list again."""


class AnswerRefused(KubeError):
    """An answer the client will not read: compressed though not asked to be, or over the size cap."""


class IllegalName(KubeError):
    """A name or namespace that cannot be one segment of a request path (empty, `.`, `..`, holding `/`, `%`,
    `?`, `#` ...): refused before any request is made (app/kubenames.py). A value a tenant wrote reached the
    client without being vetted where it was read: the call fails, and nothing is sent."""


class Unavailable(KubeError):
    """The API server could not be reached or answered 5xx/429: nothing is known; try later."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    410: Gone,
    422: Invalid,
}


def error_for(status: int, body: bytes | str | None, *, fallback: str = "") -> KubeError:
    """The typed error for an HTTP answer; the Status object's `reason` tells the two kinds of 409 apart."""
    reason, message = _status_fields(body)
    message = message or fallback or f"HTTP {status}"
    if status == 409:
        cls: type[KubeError] = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif status == 429 or status >= 500 or status == 0:
        cls = Unavailable
    else:
        cls = _BY_STATUS.get(status, KubeError)
    return cls(message, status=status, reason=reason)


def _status_fields(body: bytes | str | None) -> tuple[str, str]:
    if not body:
        return "", ""
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        return "", text[:200]
    if not isinstance(status, dict):
        return "", ""
    return str(status.get("reason") or ""), str(status.get("message") or "")
