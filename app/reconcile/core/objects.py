"""What deciding one object gives, and the body it writes: the outcomes (`Write`, `Refused`, `Waiting`,
`Deferred`), the `Item` whose pure `decide` gives one, and the helpers every decision builds its body with
(a Secret's data decoded and encoded, the stored object's fields kept under our labels, a write only when
something changed).

Keeping the decision per object lets the applier re-read and re-decide one object after a 409 instead
of overwriting it blindly, and makes a converged cluster cost zero writes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tls_injector.kube import Resource
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.discover import WorkloadRef

Obj = dict[str, Any]
Action = Literal["create", "update", "delete"]


@dataclass(frozen=True)
class Write:
    action: Action
    resource: Resource
    namespace: str
    name: str
    body: Obj | None = None
    resource_version: str = ""  # the precondition of an update or delete
    reason: str = ""  # why, for logs, events and metrics: "issued:missing", "renewed:expiring", "bundle", ...


@dataclass(frozen=True)
class Refused:
    """An object in our way that we do not own: reported, never touched."""

    message: str


@dataclass(frozen=True)
class Waiting:
    """A certificate that must be (re)issued while no CA may sign: reported, and issued in a later pass.

    `refresh` still keeps the stored Secret's `ca.crt` and labels current: its `ca.crt` is a bundle in
    use, and the new CA may only sign once every bundle in use carries it, so skipping it would wait forever.
    """

    message: str
    refresh: Write | None = None


@dataclass(frozen=True)
class Deferred:
    """A certificate that must be (re)issued while its namespace has spent its budget of this turn of the
    loop (budget.TurnBudget), or while no key of its algorithm is ready (`for_key`: keypool.KeyPool): issued
    in a later turn. As for `Waiting`, `refresh` keeps the stored Secret's `ca.crt` and labels current
    meanwhile (the CA's rotation waits on every bundle in use)."""

    refresh: Write | None = None
    for_key: bool = False


Outcome = Write | Refused | Waiting | Deferred | None


@dataclass(frozen=True, slots=True)
class Item:
    """One object to converge; `decide` is pure and may be called again on a fresher copy after a 409."""

    resource: Resource
    namespace: str
    name: str
    decide: Callable[[Obj | None], Outcome]
    workloads: tuple[WorkloadRef, ...] = ()
    client: bool = False  # a client certificate's Secret (docs/mtls.md): its own metric labels and Event reasons

    @property
    def key(self) -> tuple[str, str, str]:
        return self.resource.kind, self.namespace, self.name


def secret_data(secret: Obj | None, *, keys: Iterable[str] | None = None) -> dict[str, bytes]:
    """A Secret's data decoded (the API carries it base64-encoded), all of it or only `keys`; undecodable
    values are left out."""
    data = (secret or {}).get("data") or {}
    decoded: dict[str, bytes] = {}
    for key, value in (data.items() if keys is None else ((k, data[k]) for k in keys if k in data)):
        try:
            # base64.b64decode(value, validate=True) is this call behind a Python wrapper that copies a str
            # to bytes first: a resync decodes every leaf's tls.crt and tls.key for its seal (~1.5% of its CPU).
            decoded[key] = binascii.a2b_base64(value, strict_mode=True)
        except (ValueError, TypeError):
            continue  # tampered: treated as missing, so the certificate is re-issued
    return decoded


def encode_data(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def base_body(existing: Obj | None, resource: Resource, namespace: str, name: str, *, role: own.Role) -> Obj:
    """A copy of the stored object's top level and metadata (so other writers' fields survive) with our labels."""
    body = {**(existing or {}), "apiVersion": "v1", "kind": resource.kind}  # list items carry neither
    meta = dict(body.get("metadata") or {"name": name, "namespace": namespace})
    meta["labels"] = {**(meta.get("labels") or {}), **own.owner_labels(role)}
    meta["annotations"] = dict(meta.get("annotations") or {})
    body["metadata"] = meta
    return body


def write_if_changed(resource: Resource, existing: Obj | None, body: Obj, *, reason: str) -> Write | None:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if existing is None:
        return Write("create", resource, namespace, name, body, reason=reason)
    if same_body(existing, body):
        return None
    return Write("update", resource, namespace, name, body, existing["metadata"]["resourceVersion"], reason)


def same_body(existing: Obj, body: Obj) -> bool:
    old, new = existing.get("metadata") or {}, body["metadata"]
    return (
        existing.get("data") == body.get("data")
        and (existing.get("binaryData") or {}) == (body.get("binaryData") or {})
        and (old.get("labels") or {}) == new["labels"]
        and (old.get("annotations") or {}) == new["annotations"]
        and (old.get("ownerReferences") or []) == (new.get("ownerReferences") or [])
    )


def annotations_of(obj: Obj | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}
