"""The AdmissionReview v1 protocol: parse what the kube-apiserver sends, build what it accepts.

Pure: plain data in, plain data out. HTTP concerns (body cap, content type) live in tls_injector.web.
"""

from tls_injector.admission.clip import MAX_ECHO_CHARS, clip, shown
from tls_injector.admission.responses import (
    AdmissionResponse,
    JsonPatchOp,
    allowed,
    denied,
    patched,
    review_envelope,
    with_patch,
)
from tls_injector.admission.review import (
    BadReview,
    Envelope,
    GroupVersionKind,
    Kind,
    Operation,
    Request,
    Review,
    Route,
    Skipped,
    decode_review,
    decoder,
    envelope_route,
)

__all__ = [
    "MAX_ECHO_CHARS",
    "AdmissionResponse",
    "BadReview",
    "Envelope",
    "GroupVersionKind",
    "JsonPatchOp",
    "Kind",
    "Operation",
    "Request",
    "Review",
    "Route",
    "Skipped",
    "allowed",
    "clip",
    "decode_review",
    "decoder",
    "denied",
    "envelope_route",
    "patched",
    "review_envelope",
    "shown",
    "with_patch",
]
