"""Decoding an AdmissionReview, once, into the typed request a handler reads.

Each endpoint decodes the body exactly once, against a schema (msgspec Structs) of the envelope and of
what its handler reads of the objects: /mutate the pod's metadata and, typed, what the plan reads of its spec
(tls_injector.injection.mutate), /validate the texts at its rules' `self` paths (tls_injector.rules.reader). Everything
else in the review is skipped, not built. The envelope's Structs carry the checks of how the apiserver
fills it (its literals, and the lengths below, as msgspec constraints: checked in the decode, ~6k
instructions less per review than a Python check after it); what the decode refuses raises BadReview,
which the HTTP edge turns into a 400 (a malformed call, so the apiserver's failurePolicy decides), never
a 500.

The reason given is bounded and names every problem of the envelope (`review_problems`), read from the
body only once it is refused. What the decode accepts, it accepts as any JSON decoder would, with two
choices made here:
- a body that is not plain ASCII must be valid UTF-8 as a whole (msgspec checks only the strings it
  builds; the apiserver's JSON is UTF-8 and escapes nothing);
- nesting: on Python 3.11 (what the image ships) msgspec counts each level against the interpreter's
  recursion limit (1000) and refuses deeper bodies; where that limit was raised past 1024 (test runners
  do), or on 3.12 and later (whose C-level guard no longer follows it), a body with more than
  MAX_OPENINGS opening brackets is refused before decoding (counting them costs ~4 us, so only then).
A number beyond a double's range in a field nothing reads is skipped, not refused: finding it would cost
a scan of every body, and the apiserver (Go) cannot send one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypedDict, TypeVar

import msgspec
import orjson

from tls_injector.admission.clip import clip, shown
from tls_injector.admission.responses import AdmissionResponse

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS: frozenset[str] = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# The apiserver sends a UUID; 128 leaves room for other callers without letting a giant string through.
MAX_UID_LENGTH = 128
# API groups are DNS subdomains (at most 253 characters); kinds and versions are far shorter. The apiserver
# never sends more, so a longer one is a 400.
MAX_NAME_LENGTH = 253
# An object's name and namespace are not so bounded: mutating admission runs before validation, so the
# apiserver sends a webhook whatever name a user typed, 254 characters or a megabyte, and refuses it itself
# afterwards (seen on kube-apiserver 1.37: tests/cluster/test_legal_names.py). A 400 here would turn that
# 422 into "failed calling webhook" (500). Bounded instead by what one request to the apiserver may carry
# (3 MiB); what the log and messages echo of them is clipped (app/admission/clip.py).
MAX_SENT_NAME_LENGTH = 3 * 1024 * 1024
# Orjson's and Go's JSON depth guards stop near here; a review has one to three hundred brackets in all.
FULL_DECODE_DEPTH = 1024
MAX_OPENINGS = 1000
# A refusal's reason is at most this long: it lists the envelope's problems, each already bounded.
MAX_REASON_CHARS = 1024

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
Uid = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_UID_LENGTH)]
ShortText = Annotated[str, msgspec.Meta(max_length=MAX_NAME_LENGTH)]
SentName = Annotated[str, msgspec.Meta(max_length=MAX_SENT_NAME_LENGTH)]
# Before 3.12, C code's recursion guard (which msgspec's decoder uses per level) follows sys's limit.
_COUNT_OPENINGS = sys.version_info >= (3, 12)


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class BadReview(ValueError):
    """The request is not a usable AdmissionReview; the message says what is wrong, bounded."""


class Kind(msgspec.Struct, frozen=True):
    group: ShortText
    version: ShortText
    kind: ShortText

    def gvk(self) -> GroupVersionKind:
        return GroupVersionKind(group=self.group, version=self.version, kind=self.kind)


class Request(msgspec.Struct, kw_only=True):
    """The envelope every handler and the access log read; each endpoint's request adds the objects as
    its handler reads them."""

    uid: Uid
    kind: Kind
    operation: Operation
    namespace: SentName | None = None
    name: SentName | None = None
    dryRun: bool | None = None  # the wire's name


class Skipped(msgspec.Struct):
    """An object no handler reads: checked to be a JSON object, its members skipped unbuilt."""


class Envelope(Request, kw_only=True):
    """A request whose handler reads the envelope only (tests' stand-in handlers)."""

    object: Skipped | None = None
    oldObject: Skipped | None = None


R = TypeVar("R", bound=Request)


class Review(msgspec.Struct, Generic[R]):
    apiVersion: Literal["admission.k8s.io/v1"]  # API_VERSION and KIND, as the types mypy reads
    kind: Literal["AdmissionReview"]
    request: R


def decoder(request: type[R]) -> msgspec.json.Decoder[Review[R]]:
    return msgspec.json.Decoder(Review[request])  # type: ignore[valid-type]


def decode_review(reviews: msgspec.json.Decoder[Review[R]], body: bytes) -> R:
    """The review's request, decoded once and checked; BadReview with the reason otherwise."""
    if not body.isascii():
        try:
            body.decode()
        except UnicodeDecodeError as error:
            raise BadReview(f"invalid JSON: not UTF-8 at byte {error.start}") from None
    counted = _COUNT_OPENINGS or sys.getrecursionlimit() > FULL_DECODE_DEPTH
    if counted and body.count(b"{") + body.count(b"[") > MAX_OPENINGS:
        raise BadReview(f"invalid JSON: more than {MAX_OPENINGS} objects and arrays, nested or not")
    try:
        review = reviews.decode(body)
    except msgspec.ValidationError as error:
        raise BadReview(_explained(body, str(error))) from None
    except msgspec.DecodeError as error:
        raise BadReview(clip(f"invalid JSON: {error}", MAX_REASON_CHARS)) from None
    except RecursionError:
        raise BadReview("invalid JSON: nested too deeply") from None
    return review.request


@dataclass(frozen=True, slots=True)
class Route(Generic[R]):
    """An admission endpoint's one path: its typed decode, and the plain function of what it decodes.

    The handler is pure, synchronous and sub-millisecond; a bug in it is the edge's logged 500."""

    reviews: msgspec.json.Decoder[Review[R]]
    handle: Callable[[R], AdmissionResponse]

    def decode(self, body: bytes) -> R:
        return decode_review(self.reviews, body)

    def answer(self, body: bytes) -> AdmissionResponse:
        """Decode and handle: for callers without an HTTP edge (`check`, tests)."""
        return self.handle(self.decode(body))


def envelope_route(handle: Callable[[Envelope], AdmissionResponse]) -> Route[Envelope]:
    """A route whose handler reads the envelope only."""
    return Route(decoder(Envelope), handle)


def _explained(body: bytes, fallback: str) -> str:
    """Why a body the typed decode refused is not a review: every problem of its envelope, read from the
    body now (a refused call, so it may cost a second look), else the decoder's own words."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        return clip(f"invalid JSON: {error}", MAX_REASON_CHARS)
    problems = review_problems(decoded) or [fallback]
    return clip(f"not a valid AdmissionReview: {'; '.join(problems)}", MAX_REASON_CHARS)


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
        value = request.get(field)
        if value is not None and not (isinstance(value, str) and len(value) <= MAX_SENT_NAME_LENGTH):
            problems.append(f"request.{field} must be a string of at most {MAX_SENT_NAME_LENGTH} characters")
    if request.get("dryRun") is not None and not isinstance(request.get("dryRun"), bool):
        problems.append("request.dryRun must be a boolean")
    return problems


def short_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME_LENGTH


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
