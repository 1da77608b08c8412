"""Decoding only the part of a review an answer needs, with the full decode's refusals kept.

/mutate and /validate each have a quick path (app.injection.quick, app.rules.quick) that decodes a
review against a schema of the few fields its answer reads (msgspec) and skips the rest unbuilt, where
the full path (orjson, then parse_review) builds every value of a body of 5-10 KB (~15-25 us).

A quick path may only answer what the full path would answer the same, so what the full decode refuses
must never be answered here. `decode` returns None (the full way, which gives the 400) for:
- a body that is not plain ASCII: msgspec skips the fields outside the schema without checking their
  UTF-8, where the full decode refuses invalid UTF-8 (the apiserver's JSON escapes nothing, so a review
  with non-ASCII text simply takes the full path);
- nesting as deep as the full decode refuses (orjson: 1024 levels), even in a skipped field. On
  Python 3.11 (what the image ships) msgspec counts each level against the interpreter's recursion
  limit (1000) and fails first. Where that limit was raised past 1024 (test runners do), or on 3.12 and
  later (whose C-level recursion guard no longer follows that limit), a body with more than
  MAX_OPENINGS opening brackets goes the full way instead: counting them costs ~4 us, so only then.
  tests/test_mutate_quick.py holds both the default and a raised limit;
- anything msgspec refuses: invalid JSON, or a value of another type than the schema's.
The one difference left, on purpose: a number beyond a double's range (1e400, or an integer of 310
digits, which orjson reads as a double) in a skipped field is refused by the full decode and skipped
here. It is valid JSON, the apiserver cannot send it (Go cannot encode it), and finding it would cost a
scan of every body. Duplicate keys are taken alike: the last wins in both decoders.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol, TypeVar

import msgspec

from app.admission.review import API_VERSION, KIND, MAX_UID_LENGTH, OPERATIONS, short_text

# The full decode refuses nesting deeper than this (orjson's limit).
FULL_DECODE_DEPTH = 1024
# A review has one to three hundred; see the module docstring for why there is a bound at all.
MAX_OPENINGS = 1000

T = TypeVar("T")
# Before 3.12, C code's recursion guard (which msgspec's decoder uses per level) follows sys's limit.
_COUNT_OPENINGS = sys.version_info >= (3, 12)


class Kind(msgspec.Struct):
    group: str
    version: str
    kind: str


def decode(decoder: msgspec.json.Decoder[T], body: bytes) -> T | None:
    """`body` decoded by `decoder`, or None when only the full decode may judge it (module docstring)."""
    if not body.isascii():
        return None
    counted = _COUNT_OPENINGS or sys.getrecursionlimit() > FULL_DECODE_DEPTH
    if counted and body.count(b"{") + body.count(b"[") > MAX_OPENINGS:
        return None
    try:
        return decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the access log records of a review a quick path answered (as the full path's fields)."""

    uid: str
    kind: str
    namespace: str
    name: str
    operation: str
    dry_run: bool


class Request(Protocol):
    """The envelope fields of a quick path's request schema."""

    @property
    def uid(self) -> str: ...
    @property
    def kind(self) -> Kind: ...
    @property
    def operation(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def name(self) -> str | None: ...


def well_formed(api_version: str, kind: str, request: Request) -> bool:
    """parse_review's checks on the envelope, on values a schema already typed (str, bool or null)."""
    return (
        api_version == API_VERSION and kind == KIND
        and 0 < len(request.uid) <= MAX_UID_LENGTH and request.operation in OPERATIONS
        and short_text(request.kind.group) and short_text(request.kind.version) and short_text(request.kind.kind)
        and (request.namespace is None or short_text(request.namespace))
        and (request.name is None or short_text(request.name))
    )
