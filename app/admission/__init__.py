"""The AdmissionReview v1 protocol: parse what the kube-apiserver sends, build what it accepts.

Pure: plain data in, plain data out. HTTP concerns (body cap, content type) live in app.web.
"""

from app.admission.clip import MAX_ECHO_CHARS, clip, shown
from app.admission.responses import (
    AdmissionResponse,
    JsonPatchOp,
    allowed,
    denied,
    patched,
    review_envelope,
)
from app.admission.review import (
    AdmissionRequest,
    BadReview,
    GroupVersionKind,
    Handler,
    Operation,
    parse_review,
)

__all__ = [
    "MAX_ECHO_CHARS",
    "AdmissionRequest",
    "AdmissionResponse",
    "BadReview",
    "GroupVersionKind",
    "Handler",
    "JsonPatchOp",
    "Operation",
    "allowed",
    "clip",
    "denied",
    "parse_review",
    "patched",
    "review_envelope",
    "shown",
]
