"""The CA Secret in the injector's own namespace: create it, rotate it, persist every trust-state step.

The whole CA set lives in one Secret, so every step of the trust state machine is one atomic write with
a resourceVersion precondition: a crash leaves either the old or the new state, and two reconcilers
racing cannot both win. A new CA is only ever minted after a read *confirmed* the Secret is absent (the
caller passes `existing=None` only on NotFound), or when the stored set itself says a rotation is due.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from app.injection.names import DOMAIN
from app.kube import SECRETS
from app.pki import (
    CA_LOOKAHEAD,
    CA_VALIDITY,
    SETTLE,
    CaSet,
    CaState,
    CertKey,
    TrustFacts,
    add_ca,
    adopt_orphans,
    advance,
    decode,
    encode,
    fingerprint,
    make_ca,
    observe,
    rotation_due,
)
from app.reconcile import ownership as own
from app.reconcile.plan import Obj, Write, encode_data, secret_data

# Annotation prefix (+ 16 hex digits of the CA's SHA-256) recording when a pass first saw it in every bundle.
_EVERYWHERE = f"{DOMAIN}/in-every-bundle-since-"


class CaUnusable(Exception):
    """The stored CA Secret cannot be used (not ours, or its data is inconsistent): a person must look.

    Never answered by minting a new CA: that would silently distrust every certificate in the cluster.
    """


@dataclass(frozen=True)
class CaPolicy:
    secret_name: str = own.CA_SECRET
    common_name: str = "tls-injector CA"
    validity: timedelta = CA_VALIDITY
    lookahead: timedelta = CA_LOOKAHEAD
    settle: timedelta = SETTLE


@dataclass(frozen=True)
class CaStep:
    """The CA set to use in this pass, and the write that must succeed before anything is signed with it."""

    cas: CaSet
    write: Write | None
    reason: str = ""


def decide_ca(
    existing: Obj | None,
    *,
    namespace: str,
    bundles: Iterable[Sequence[Any]],
    leaves: Iterable[Sequence[Any]],
    now: datetime,
    policy: CaPolicy = CaPolicy(),  # frozen, so one shared default is safe
    user_ca: CertKey | None = None,
) -> CaStep:
    """Load the set, add a CA when one is needed, take every step the observed facts allow.

    `bundles` are the certificates of every trust bundle in use (an empty one for a namespace that needs
    a bundle and has none yet), `leaves` the chains served by the leaf Secrets in use.
    """
    stored = load_ca_set(existing, user_ca=user_ca)
    forced = own.FORCE_REPLACE_ANNOTATION in _annotations(existing)
    bundles, leaves = [list(b) for b in bundles], [list(c) for c in leaves]
    cas, reason = _with_new_ca(stored, now=now, policy=policy, user_ca=user_ca, forced=forced)
    if not stored.records:  # the set was lost (or never existed): keep trusting what is still served
        cas = adopt_orphans(cas, bundles=bundles, leaves=leaves, now=now)
    facts, annotations = gate_propagation(cas, observe(cas, bundles=bundles, leaves=leaves),
                                          _annotations(existing), now=now, settle=policy.settle)
    cas = advance(cas, facts, now=now, settle=policy.settle)
    if cas.states() != stored.states() and not reason:
        reason = "ca-state:" + ",".join(f"{fp[:12]}={state}" for fp, state in cas.states().items())
    return CaStep(cas, _write(existing, namespace, policy, cas, user_ca, annotations=annotations,
                              reason=reason or "ca"))


def gate_propagation(
    cas: CaSet, facts: TrustFacts, annotations: dict[str, str], *, now: datetime, settle: timedelta
) -> tuple[TrustFacts, dict[str, str]]:
    """Count a new CA as "in every bundle" only once it has been *observed* there for `settle`.

    The state machine's settle runs from when the CA was added; if the bundles were written late (a crash
    between the CA write and the bundle writes, a namespace that failed), kubelet would not have had
    its propagation time. The first time a pass sees the CA everywhere is recorded in an annotation of
    the CA Secret (written with the same precondition as the set), and the step waits `settle` from there.
    """
    kept = {k: v for k, v in annotations.items() if not k.startswith(_EVERYWHERE) and k != own.FORCE_REPLACE_ANNOTATION}
    everywhere = set(facts.in_every_bundle)
    for record in cas.in_state(CaState.UNTRUSTED):
        if record.fingerprint not in everywhere:
            continue
        key = _EVERYWHERE + record.fingerprint[:16]
        first_seen = _parse_time(annotations.get(key)) or now
        kept[key] = first_seen.isoformat()
        if now - first_seen < settle:
            everywhere.discard(record.fingerprint)
    return TrustFacts(frozenset(everywhere), facts.leaf_issuers), kept


def _parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None  # edited by hand: start the wait again, the safe direction


def load_ca_set(existing: Obj | None, *, user_ca: CertKey | None = None) -> CaSet:
    """The stored set, with the user-provided CA's key put back in memory (it is never stored here)."""
    if existing is None:
        return CaSet()
    if not own.is_owned(existing, "ca"):
        raise CaUnusable(f"Secret {existing['metadata'].get('name')} exists but is not managed by tls-injector")
    try:
        cas = decode(secret_data(existing))
    except ValueError as e:
        raise CaUnusable(f"the CA Secret is inconsistent: {e}") from e
    if user_ca is None:
        return cas
    user_fp = fingerprint(user_ca.cert)
    return CaSet(tuple(dataclasses.replace(r, key=user_ca.key) if r.fingerprint == user_fp else r for r in cas.records))


def _with_new_ca(
    cas: CaSet, *, now: datetime, policy: CaPolicy, user_ca: CertKey | None, forced: bool
) -> tuple[CaSet, str]:
    if user_ca is not None:
        added = add_ca(cas, user_ca, now=now)  # a changed user CA rotates in like any other
        return added, ("user-ca" if added != cas else "")
    pending = any(r.state in (CaState.UNTRUSTED, CaState.TRUSTED_UNUSED) for r in cas.records)
    due = rotation_due(cas, now=now, lookahead=policy.lookahead)
    if not due and not (forced and not pending):
        return cas, ""
    new = make_ca(common_name=policy.common_name, now=now, validity=policy.validity)
    return add_ca(cas, new, now=now), "ca-created" if not cas.records else ("ca-forced" if forced else "ca-expiring")


def _write(
    existing: Obj | None, namespace: str, policy: CaPolicy, cas: CaSet, user_ca: CertKey | None, *,
    annotations: dict[str, str], reason: str
) -> Write | None:
    stored = encode(_without_user_key(cas, user_ca))
    old = secret_data(existing)
    kept = {k: v for k, v in old.items() if not _is_state_key(k)}
    data = {**kept, **stored}
    if existing is not None and data == old and annotations == _annotations(existing):
        return None
    meta = dict((existing or {}).get("metadata") or {"name": policy.secret_name, "namespace": namespace})
    meta["labels"] = {**(meta.get("labels") or {}), **own.owner_labels("ca")}
    meta["annotations"] = annotations
    body = {**(existing or {}), "apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "data": encode_data(data)}
    if existing is None:
        return Write("create", SECRETS, namespace, policy.secret_name, body, reason=reason)
    return Write("update", SECRETS, namespace, policy.secret_name, body, meta["resourceVersion"], reason)


def _without_user_key(cas: CaSet, user_ca: CertKey | None) -> CaSet:
    if user_ca is None:
        return cas
    user_fp = fingerprint(user_ca.cert)
    return CaSet(tuple(dataclasses.replace(r, key=None) if r.fingerprint == user_fp else r for r in cas.records))


def _is_state_key(key: str) -> bool:
    """Keys written by `encode` (`<sha256>.<suffix>`): replaced wholesale, so a removed CA disappears."""
    fp, _, suffix = key.partition(".")
    return len(fp) == 64 and bool(suffix)


def _annotations(obj: Obj | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}
