"""Parsing an AdmissionReview request into the few fields the handlers use.

Every check here mirrors a way a caller can get the envelope wrong; each raises BadReview, which the
HTTP edge turns into a 400 (a malformed call, so the apiserver's failurePolicy decides), never a 500.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Protocol, TypedDict, cast

from app.admission.clip import shown
from app.admission.responses import AdmissionResponse

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS: frozenset[str] = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# The apiserver sends a UUID; 128 leaves room for other callers without letting a giant string through.
MAX_UID_LENGTH = 128
# Object names and namespaces are DNS subdomains or labels (at most 253 characters), and so are API
# groups; kinds and versions are far shorter. The apiserver never sends more, so a longer one is a 400
# and everything the access log and messages take from the envelope is bounded here, at the door.
MAX_NAME_LENGTH = 253

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class BadReview(ValueError):
    """The request is not a usable AdmissionReview; the message says what is wrong."""


class AdmissionRequest(NamedTuple):
    """The parts of `request` that handlers need; `raw` keeps the rest, untouched.

    Immutable like a frozen dataclass, and built in a fifth of its time (a frozen dataclass sets each
    field through object.__setattr__): one is made per admission call.
    """

    uid: str
    kind: GroupVersionKind
    operation: Operation
    namespace: str
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    raw: dict[str, Any]


class Handler(Protocol):
    """What /mutate and /validate call: pure, synchronous, sub-millisecond."""

    def __call__(self, request: AdmissionRequest, /) -> AdmissionResponse: ...


def parse_review(body: object) -> AdmissionRequest:
    """Validate the envelope and return the request; raise BadReview with every problem found.

    What the apiserver sends is always well formed, so that case is one boolean test; only a review
    that fails it is walked again to name every problem (`review_problems`).
    """
    if isinstance(body, dict) and body.get("apiVersion") == API_VERSION and body.get("kind") == KIND:
        request = body.get("request")
        if isinstance(request, dict) and _well_formed(request):
            return _to_request(request)
    raise BadReview("; ".join(review_problems(body)))


def _well_formed(request: dict[str, Any]) -> bool:
    """True exactly when `review_problems` finds nothing in this request (a test holds the two together)."""
    uid, operation, kind = request.get("uid"), request.get("operation"), request.get("kind")
    namespace, name, dry_run = request.get("namespace"), request.get("name"), request.get("dryRun")
    new, old = request.get("object"), request.get("oldObject")
    return (
        isinstance(uid, str) and 0 < len(uid) <= MAX_UID_LENGTH
        and isinstance(operation, str) and operation in OPERATIONS
        and isinstance(kind, dict)
        and short_text(kind.get("group")) and short_text(kind.get("version")) and short_text(kind.get("kind"))
        and (new is None or isinstance(new, dict)) and (old is None or isinstance(old, dict))
        and (namespace is None or short_text(namespace)) and (name is None or short_text(name))
        and (dry_run is None or isinstance(dry_run, bool))
    )


def review_problems(body: object) -> list[str]:
    """Every way `body` is not a usable AdmissionReview; empty when it is one."""
    if not isinstance(body, dict):
        return [f"an AdmissionReview must be a JSON object, got {_json_type(body)}"]
    problems: list[str] = []
    if body.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion must be {API_VERSION!r}, got {shown(body.get('apiVersion'))}")
    if body.get("kind") != KIND:
        problems.append(f"kind must be {KIND!r}, got {shown(body.get('kind'))}")
    request = body.get("request")
    if not isinstance(request, dict):
        problems.append(f"request must be an object, got {_json_type(request)}")
        return problems
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > MAX_UID_LENGTH:
        problems.append(f"request.uid must be a non-empty string of at most {MAX_UID_LENGTH} characters")
    problems.extend(_request_problems(request))
    return problems


def _request_problems(request: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    operation = request.get("operation")
    # The type check first: a JSON array or object is unhashable, and `in` on a set would raise on it.
    if not isinstance(operation, str) or operation not in OPERATIONS:
        problems.append(f"request.operation must be one of {sorted(OPERATIONS)}")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not all(short_text(kind.get(k)) for k in ("group", "version", "kind")):
        problems.append(f"request.kind must be an object with string group, version and kind of at most "
                        f"{MAX_NAME_LENGTH} characters")
    for field in ("object", "oldObject"):
        if request.get(field) is not None and not isinstance(request.get(field), dict):
            problems.append(f"request.{field} must be an object or null")
    for field in ("namespace", "name"):
        if request.get(field) is not None and not short_text(request.get(field)):
            problems.append(f"request.{field} must be a string of at most {MAX_NAME_LENGTH} characters")
    if request.get("dryRun") is not None and not isinstance(request.get("dryRun"), bool):
        problems.append("request.dryRun must be a boolean")
    return problems


def _to_request(request: dict[str, Any]) -> AdmissionRequest:
    kind = request["kind"]
    return AdmissionRequest(
        uid=request["uid"],
        kind=GroupVersionKind(group=kind["group"], version=kind["version"], kind=kind["kind"]),
        operation=cast(Operation, request["operation"]),
        namespace=request.get("namespace") or "",
        name=request.get("name") or "",
        object=request.get("object"),
        old_object=request.get("oldObject"),
        dry_run=bool(request.get("dryRun")),
        raw=request,
    )


def short_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME_LENGTH


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
