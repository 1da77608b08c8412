"""/mutate's answer for one more replica of a pod template, found without decoding the pod.

A rollout or scale-up sends hundreds of Pod CREATE reviews that differ only in uid, name and timestamps.
`Answers` remembers the answer per pod shape, but finding it still took a full decode of the review
(for a 4.5 KB pod ~15 us, most of /mutate's own work) and re-encoding the spec as the key. Here the
review is decoded against a schema of only the fields the answer depends on (msgspec), and the pod's
spec stays the raw JSON text it arrived as: that text is the key, next to the metadata the plan reads
(`naming_inputs`) and the CA fingerprints. Other fields are skipped, not built.

This path only ever answers what the full path (parse_review, then the handler) would answer the same:
- it takes a review only when it is a well-formed Pod CREATE that opted in (the same checks as
  parse_review and the handler make, on the same values), decoded as app.admission.quick decodes (which
  leaves every body the full decode would refuse to the full path); anything else returns None and goes
  the full way, which also gives every malformed review its own 400;
- a pod of a shape not seen yet is planned by the handler's own plan (`make`) from what the plan reads,
  the pod's metadata and spec, valued as the full path values them (the spec decoded by orjson; the
  metadata as `_Pod` says); the rest of the review is not built. The answer is remembered for exactly
  this key; it never depends on the pod's name or uid (the uid is put back per review), and one that
  names the pod's API token volume is not shared with the pods whose token volume has another name
  (app.injection.answers.shape_key).
Bounds: as `Answers` (MAX_ENTRIES answers, keys of at most MAX_KEY_BYTES; a larger pod goes the full way).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
import orjson

from app.admission import AdmissionResponse
from app.admission.quick import Kind, decode, well_formed
from app.injection import names
from app.injection.answers import MAX_ENTRIES, MAX_KEY_BYTES, Answer, shape_key, shareable
from app.injection.workload import naming_inputs


class _Pod(msgspec.Struct):
    # The spec stays text (the key, and planned from only for a new shape). The metadata is decoded by
    # msgspec, which reads a few numbers otherwise than the full path's orjson: an integer past 64 bits
    # stays an int (orjson: a float) and one past a double's range is refused (orjson: refused too). So
    # the key is made only when orjson can write the metadata's naming inputs (no such integer), and on
    # those the two decoders agree: the plan, which reads nothing else of the metadata, sees what the full
    # path would give it.
    metadata: dict[str, Any]
    spec: msgspec.Raw = msgspec.Raw(b"null")


class _Request(msgspec.Struct):
    uid: str
    kind: Kind
    operation: str
    object: _Pod
    oldObject: None = None  # a CREATE has none (any other value: the full path)
    namespace: str | None = None
    name: str | None = None
    dryRun: bool | None = None
    subResource: str | None = None


class _Review(msgspec.Struct):
    apiVersion: str
    kind: str
    request: _Request


_DECODER = msgspec.json.Decoder(_Review)


@dataclass(frozen=True, slots=True)
class PodReview:
    """A Pod CREATE review the quick path may answer: what the access log records, and the answer's key."""

    uid: str
    namespace: str
    name: str
    dry_run: bool
    key: bytes
    token: bytes | None  # the token volume name the key stands a placeholder in for (answers.shape_key)
    metadata: dict[str, Any]
    spec: bytes  # the spec's JSON text, decoded only when the answer must be made (`QuickMutate.make`)
    fingerprints: tuple[str, ...]  # the CA fingerprints in the key: the answer is made with these


# Makes the answer to a Pod CREATE (uid, the pod's metadata and spec, the CA fingerprints): the handler's.
Plan = Callable[[str, dict[str, Any], Sequence[str]], AdmissionResponse]


class QuickMutate:
    def __init__(self, ca_fingerprints: Callable[[], Sequence[str]], plan: Plan, *, max_entries: int = MAX_ENTRIES,
                 max_key_bytes: int = MAX_KEY_BYTES) -> None:
        self._fingerprints = ca_fingerprints
        self._plan = plan
        self._entries: dict[bytes, Answer] = {}
        self._lock = threading.Lock()
        self.max_entries, self.max_key_bytes = max_entries, max_key_bytes
        self.hits = self.misses = 0

    def pod_review(self, body: bytes) -> PodReview | None:
        """The review as a Pod CREATE this path may answer, or None: then only the full path may."""
        request = _pod_create(body)
        if request is None:
            return None
        metadata = request.object.metadata
        labels = metadata.get("labels")
        if isinstance(labels, dict) and labels.get(names.INJECT_LABEL) == names.POD_OPT_OUT:
            return None
        fingerprints = tuple(self._fingerprints())
        try:
            head = orjson.dumps([naming_inputs(metadata), fingerprints])
        except (orjson.JSONEncodeError, TypeError):
            return None
        spec = bytes(request.object.spec)
        if len(head) + len(spec) > self.max_key_bytes:
            return None
        key, token = shape_key(head + b"\0" + spec)
        return PodReview(request.uid, request.namespace or "", request.name or "", bool(request.dryRun),
                         key, token, metadata, spec, fingerprints)

    def answer(self, review: PodReview) -> AdmissionResponse | None:
        """The remembered answer for this pod's shape, with its uid; None when there is none yet."""
        answer = self._entries.get(review.key)
        if answer is None:
            self.misses += 1
            return None
        self.hits += 1
        return cast(AdmissionResponse, {"uid": review.uid, **answer})

    def make(self, review: PodReview) -> AdmissionResponse | None:
        """The handler's answer to `review`, made from its metadata and spec (the only parts of the pod the
        plan reads, valued as the full path values them) and remembered; None when the spec does not
        decode (then the full path refuses the body)."""
        try:
            spec = orjson.loads(review.spec)
        except orjson.JSONDecodeError:
            return None
        response = self._plan(review.uid, {"metadata": review.metadata, "spec": spec}, review.fingerprints)
        self.remember(review, response)
        return response

    def remember(self, review: PodReview, response: AdmissionResponse) -> None:
        """Keep the handler's answer to `review` for the next pod of its shape."""
        if response.get("uid") != review.uid:
            return
        answer = {k: v for k, v in response.items() if k != "uid"}
        if not shareable(answer, review.token):
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.pop(next(iter(self._entries)))
            self._entries[review.key] = answer


def _pod_create(body: bytes) -> _Request | None:
    """The request when `body` is a review of a Pod CREATE, checked as parse_review and the handler check
    it before planning, on the same values; None otherwise."""
    review = decode(_DECODER, body)
    if review is None:
        return None
    request, kind = review.request, review.request.kind
    well_formed_pod = (
        well_formed(review.apiVersion, review.kind, request)
        and request.operation == "CREATE" and not request.subResource and kind.group == "" and kind.kind == "Pod"
    )
    return request if well_formed_pod else None
