"""A member's report on the hub's roots (docs/multicluster.md), one format at both ends: what the member
writes into its FEDERATION_STATUS_CONFIGMAP (`acknowledgement`, `status_body`: since when every bundle in
use carries each root, which roots leaves chain to, its cluster's id), and the hub's reading of it, every
field checked (`read_ack`: the member's to write, so untrusted input). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tls_injector import names
from tls_injector.pki import (
    fingerprint,
    issued_by,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.objects import Obj


@dataclass(frozen=True)
class MemberAck:
    """What a member reports in its FEDERATION_STATUS_CONFIGMAP: since when every bundle in use carries
    each root (by 16 hex digits of its SHA-256; every time aware, in UTC), and which roots some leaf in use
    chains to. Built by `parse_report` from what the member wrote, which is the member's to write."""

    since: dict[str, datetime]
    in_use: frozenset[str]
    cluster_id: str = ""  # the member's kube-system Namespace uid ("" when it did not say)


class ReportUnreadable(ValueError):
    """A member's report that does not parse into a MemberAck: that member's reason, never the hub's."""


# A report names the roots of two roles, two of each during a rotation (old and new): 16 is room for a
# rotation started before the last one ended, several times over, and bounds what one report may make the
# hub hold. A time written as isoformat() is 32 characters (with microseconds and offset); 64 is twice that.
MAX_REPORTED_ROOTS = 16
MAX_TIME_LENGTH = 64
_FP16 = re.compile(r"^[0-9a-f]{16}$")
# A Namespace's uid as the API server makes it: a UUID, 36 characters.
_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def acknowledgement(roots: Sequence[Any], *, bundles: Sequence[Sequence[Any]], leaves: Sequence[Sequence[Any]],
                    previous: dict[str, str], now: datetime) -> dict[str, str]:
    """The status ConfigMap's annotations for this pass: a root in every bundle in use keeps the time it
    was first seen there (a root that left a bundle starts again), and the roots leaves chain to."""
    annotations: dict[str, str] = {}
    held = [{fingerprint(c) for c in b} for b in bundles]
    for root in roots:
        fp = fingerprint(root)
        if all(fp in b for b in held):
            key = names.IN_EVERY_BUNDLE_SINCE_PREFIX + fp[:16]
            annotations[key] = previous.get(key) or now.isoformat()
    in_use = sorted({fingerprint(r)[:16] for r in roots
                     if any(chain and (chain[-1] == r or issued_by(chain[-1], r)) for chain in leaves)})
    annotations[names.ROOTS_IN_USE_ANNOTATION] = ",".join(in_use)
    return annotations


def status_body(existing: Obj | None, namespace: str, annotations: dict[str, str]) -> Obj | None:
    """The member's status ConfigMap with these annotations; None when it already says exactly that."""
    meta = dict((existing or {}).get("metadata") or {"name": names.FEDERATION_STATUS_CONFIGMAP,
                                                     "namespace": namespace})
    if existing is not None and (meta.get("annotations") or {}) == annotations and \
            own.is_owned(existing, "federation-status"):
        return None
    meta["labels"] = {**(meta.get("labels") or {}), **own.owner_labels("federation-status")}
    meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def read_ack(obj: Obj | None) -> MemberAck:
    """The member's report, every field checked (ReportUnreadable with the first reason otherwise): an
    object of the report's name that is not ours, a key or a root that is not 16 lowercase hex digits, a
    time without its UTC offset (it cannot be compared with the hub's clock) or too long, more roots than
    MAX_REPORTED_ROOTS. No report at all is an empty one (the member has not joined yet)."""
    if obj is None:
        return MemberAck({}, frozenset())
    if not own.is_owned(obj, "federation-status"):
        raise ReportUnreadable(f"ConfigMap {names.FEDERATION_STATUS_CONFIGMAP} is not labelled as written by "
                               "tls-injector")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict):
        raise ReportUnreadable("its annotations are not a map")
    since = {_fp16(key.removeprefix(names.IN_EVERY_BUNDLE_SINCE_PREFIX), key): _aware(value, key)
             for key, value in annotations.items() if str(key).startswith(names.IN_EVERY_BUNDLE_SINCE_PREFIX)}
    listed = str(annotations.get(names.ROOTS_IN_USE_ANNOTATION) or "")
    if len(listed) > MAX_REPORTED_ROOTS * 17:
        raise ReportUnreadable(f"{names.ROOTS_IN_USE_ANNOTATION} is {len(listed)} characters, more than "
                               f"{MAX_REPORTED_ROOTS} roots take")
    in_use = frozenset(_fp16(v, names.ROOTS_IN_USE_ANNOTATION) for v in listed.split(",") if v)
    if len(since) > MAX_REPORTED_ROOTS:
        raise ReportUnreadable(f"it names {len(since)} roots in every bundle, more than {MAX_REPORTED_ROOTS}")
    cluster_id = str(annotations.get(names.CLUSTER_ID_ANNOTATION) or "")
    if cluster_id and not _UID.match(cluster_id):
        raise ReportUnreadable(f"{names.CLUSTER_ID_ANNOTATION}: {cluster_id[:40]!r} is not a Namespace uid")
    return MemberAck(since, in_use, cluster_id)


def _fp16(value: str, where: str) -> str:
    if not _FP16.match(value):
        raise ReportUnreadable(f"{where[:120]}: {value[:40]!r} is not 16 lowercase hex digits (a root's "
                               "fingerprint)")
    return value


def _aware(value: object, where: str) -> datetime:
    text = str(value)
    if len(text) > MAX_TIME_LENGTH:
        raise ReportUnreadable(f"{where}: the time is {len(text)} characters long")
    try:
        when = datetime.fromisoformat(text)
    except ValueError as e:
        raise ReportUnreadable(f"{where}: {text!r} is not an ISO 8601 time") from e
    if when.tzinfo is None or when.utcoffset() is None:
        raise ReportUnreadable(f"{where}: {text!r} has no UTC offset, so it cannot be compared with the "
                               "hub's clock")
    return when.astimezone(UTC)
