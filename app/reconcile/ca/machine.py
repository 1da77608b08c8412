"""The CA Secret in the injector's own namespace: create it, rotate it, persist every trust-state step.

The whole CA set lives in one Secret, so every step of the trust state machine is one atomic write with
a resourceVersion precondition: a crash leaves either the old or the new state, and two reconcilers
racing cannot both win. A new CA is only ever minted after a read *confirmed* the Secret is absent (the
caller passes `existing=None` only on NotFound), or when the stored set itself says a rotation is due.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tls_injector import names
from tls_injector.kube import SECRETS
from tls_injector.pki import (
    CA_LOOKAHEAD,
    CA_VALIDITY,
    SETTLE,
    CaRole,
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
    path_length,
    rotation_due,
    same_key,
    swap_signer,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.objects import Obj, Write, encode_data, secret_data

_PENDING = (CaState.UNTRUSTED, CaState.TRUSTED_UNUSED)
_LEAVING = (CaState.PHASE_OUT, CaState.ZOMBIE)
# Annotation prefix (+ 16 hex digits of the CA's SHA-256) recording when a pass first saw it in every bundle.
_EVERYWHERE = names.IN_EVERY_BUNDLE_SINCE_PREFIX


def other_role(role: CaRole) -> CaRole:
    return "client" if role == "serving" else "serving"


def shared_key_problem(role: CaRole, ca: CertKey, *, other_user_ca: CertKey | None,
                       other_set: Obj | None) -> str | None:
    """Why the user's own CA of `role` may not be used beside the other role's CAs (the user's own CA of
    that role, and every CA in that role's CA Secret `other_set`: the generated one, or one on its way in
    or out), or None. A key that signs serving certificates must never sign client ones, nor the other way
    round (docs/mtls.md): each role needs a key of its own."""
    others = [other_user_ca.cert] if other_user_ca is not None else []
    with suppress(CaUnusable):  # that set's own check says why it cannot be used, when its role is needed
        others += [record.cert for record in load_ca_set(other_set).records]
    other = other_role(role)
    if any(same_key(ca.cert, cert) for cert in others):
        return f"its key is also the {other} CA's: a {role} CA must have a key of its own, or it could sign {other} " \
               "certificates"
    return None


class CaUnusable(Exception):
    """The stored CA Secret cannot be used (not ours, or its data is inconsistent): a person must look.

    Never answered by minting a new CA: that would silently distrust every certificate in the cluster.
    """


@dataclass(frozen=True)
class CaPolicy:
    secret_name: str = names.CA_SECRET
    common_name: str = "tls-injector CA"
    validity: timedelta = CA_VALIDITY
    lookahead: timedelta = CA_LOOKAHEAD
    settle: timedelta = SETTLE
    # DNS subtrees a new CA's NameConstraints permit (app/pki/names.service_name_constraints); empty: none.
    # The reconciler sets the workload CA's from the cluster domain; the webhook's CA has none (its
    # serving certificate keeps the short forms, and only the API server trusts that CA).
    permitted_dns: tuple[str, ...] = ()
    # With no set stored (a fresh install, or the CA Secret deleted), keep trusting the CAs still served
    # (`adopt_orphans`). Only where no tenant can write a bundle or a leaf in use: the webhook's set (its
    # caBundles are cluster-scoped, its serving Secret is in our namespace). Never for the workload CA,
    # whose bundles and leaf Secrets live in tenants' namespaces, where a tenant can create them with our
    # labels, so a CA "still served" there may be one a tenant planted (docs/security.md): there the new
    # CA signs at once and every leaf is re-issued from it; restore a lost set from a backup instead.
    adopt_orphans: bool = False
    # The path length of a CA this policy mints: 0 signs leaves only; a hub's roots (`reconcile --hub`)
    # need 1 to sign its members' intermediates, and a stored signer with less is rotated out.
    path_length: int = 0


@dataclass(frozen=True)
class CaStep:
    """The CA set to use in this pass, and the write that must succeed before anything is signed with it.

    `waiting` says why no CA may sign in this pass (empty when one may); `next_step_at` is when the set can
    next move on time alone (a settle ending), so a loop can pass again then instead of at its resync.
    """

    cas: CaSet
    write: Write | None
    waiting: str = ""
    next_step_at: datetime | None = None


def decide_ca(
    existing: Obj | None,
    *,
    namespace: str,
    bundles: Iterable[Sequence[Any]],
    leaves: Iterable[Sequence[Any]],
    now: datetime,
    policy: CaPolicy = CaPolicy(),  # frozen, so one shared default is safe
    user_ca: CertKey | None = None,
    external: Callable[[CaSet, TrustFacts], TrustFacts] | None = None,
) -> CaStep:
    """Load the set, add a CA when one is needed, take every step the observed facts allow.

    `bundles` are the certificates of every trust bundle in use (an empty one for a namespace that needs
    a bundle and has none yet), `leaves` the chains served by the leaf Secrets in use.
    """
    stored = load_ca_set(existing, user_ca=user_ca)
    forced = names.FORCE_REPLACE_ANNOTATION in _annotations(existing)
    # The leaves as given when a sequence (a pass's Chains, parsed only as far as they are read).
    bundles, leaves = [list(b) for b in bundles], leaves if isinstance(leaves, Sequence) else list(leaves)
    cas, reason = _with_new_ca(stored, now=now, policy=policy, user_ca=user_ca, forced=forced)
    if not stored.records and policy.adopt_orphans:  # lost: keep trusting what is still served
        cas = adopt_orphans(cas, bundles=bundles, leaves=leaves, now=now)
    facts, annotations = gate_propagation(cas, observe(cas, bundles=bundles, leaves=leaves),
                                          _annotations(existing), now=now, settle=policy.settle)
    if external is not None:  # a hub: what its members report of their bundles and leaves (federation.py)
        facts = external(cas, facts)
    cas = advance(cas, facts, now=now, settle=policy.settle)
    if cas.states() != stored.states() and not reason:
        reason = "ca-state:" + ",".join(f"{fp[:12]}={state}" for fp, state in cas.states().items())
    write = _write(existing, namespace, policy, cas, user_ca, annotations=annotations, reason=reason or "ca")
    return CaStep(cas, write, waiting=signer_wait(cas, annotations, settle=policy.settle),
                  next_step_at=next_step_at(cas, annotations, settle=policy.settle))


def signer_wait(cas: CaSet, annotations: dict[str, str], *, settle: timedelta) -> str:
    """Why no CA may sign now, for a person (empty when one may): certificates that need one wait.

    That happens during the replacement of a user-provided CA: the old key left the cluster with the
    user's change, and the new CA signs only once every bundle in use has carried it for `settle`.
    """
    if cas.signer() is not None:
        return ""
    pending = [r for r in cas.records if r.state in _PENDING]
    if not pending:
        return "no CA in the set has its private key (check the CA Secret)"
    new = pending[-1]
    name = f"the new CA {new.fingerprint[:16]}"
    if new.state is CaState.TRUSTED_UNUSED:
        return f"{name} is trusted by every bundle in use; it signs from the next pass"
    seen = _parse_time(annotations.get(_EVERYWHERE + new.fingerprint[:16]))
    if seen is None:
        return f"{name} is not yet in every trust bundle in use; it is being added to them"
    ready = max(seen, new.since) + settle
    return (f"{name} is in every trust bundle in use since {seen.isoformat()}; it signs after {settle} "
            f"for kubelet to update mounted bundles, from {ready.isoformat()}")


def next_step_at(cas: CaSet, annotations: dict[str, str], *, settle: timedelta) -> datetime | None:
    """The earliest time a CA of the set moves on time alone: a settle ending, or a promotion due now.

    Steps that wait for writes (bundles carrying a new CA, leaves moving off an old one) are not here:
    those writes wake a watching loop themselves.
    """
    due: list[datetime] = []
    for r in cas.records:
        seen = _parse_time(annotations.get(_EVERYWHERE + r.fingerprint[:16]))
        if r.state is CaState.UNTRUSTED and seen is not None:
            due.append(max(seen, r.since) + settle)
        elif r.state is CaState.TRUSTED_UNUSED:
            due.append(r.since)
        elif r.state is CaState.ZOMBIE:
            due.append(r.since + settle)
    return min(due, default=None)


def gate_propagation(
    cas: CaSet, facts: TrustFacts, annotations: dict[str, str], *, now: datetime, settle: timedelta
) -> tuple[TrustFacts, dict[str, str]]:
    """Count a new CA as "in every bundle" only once it has been *observed* there for `settle`.

    The state machine's settle runs from when the CA was added; if the bundles were written late (a crash
    between the CA write and the bundle writes, a namespace that failed), kubelet would not have had
    its propagation time. The first time a pass sees the CA everywhere is recorded in an annotation of
    the CA Secret (written with the same precondition as the set), and the step waits `settle` from there.
    """
    kept = {k: v for k, v in annotations.items()
            if not k.startswith(_EVERYWHERE) and k != names.FORCE_REPLACE_ANNOTATION}
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
        added = _with_user_ca(cas, user_ca, now=now)
        return added, ("user-ca" if added != cas else "")
    pending = any(r.state in _PENDING for r in cas.records)
    due = rotation_due(cas, now=now, lookahead=policy.lookahead)
    signer = cas.signer()
    depth = path_length(signer.cert) if signer is not None else None  # None: no limit
    too_short = not pending and policy.path_length > 0 and depth is not None and depth < policy.path_length
    if too_short and not due and not forced:
        # A standalone cluster turned hub: its CA signs leaves only. A new root rotates in through the
        # state machine like any replacement (trusted everywhere first, then it signs).
        return add_ca(cas, _mint(policy, now), now=now), "ca-hub-root"
    if not due and not (forced and not pending):
        return cas, ""
    new = _mint(policy, now)
    return add_ca(cas, new, now=now), "ca-created" if not cas.records else ("ca-forced" if forced else "ca-expiring")


def _mint(policy: CaPolicy, now: datetime) -> CertKey:
    # Path length 0 unless a hub: it signs leaves only, never another CA (an intermediate per namespace
    # would need 1: docs/security.md says what that would cost).
    return make_ca(common_name=policy.common_name, now=now, validity=policy.validity,
                   path_length=policy.path_length, permitted_dns=policy.permitted_dns)


def _with_user_ca(cas: CaSet, user_ca: CertKey, *, now: datetime) -> CaSet:
    """The user's CA is the one that must sign; a changed one rotates in like any other (`add_ca`).

    Switching back to a CA that is being replaced is a replacement too: any other CA still on its way
    (it has no key here: it could never sign) is superseded, and a user CA found PHASE_OUT or ZOMBIE
    joins again as new. It is still in every bundle, so nothing is untrusted meanwhile, and it signs
    again only after the same propagation checks as any new CA.
    """
    swapped = swap_signer(cas, user_ca, now=now)  # a renewed intermediate under the same root
    if swapped is not None:
        return swapped
    fp = fingerprint(user_ca.cert)
    kept = tuple(r.moved(CaState.ZOMBIE, now) if r.state in _PENDING and r.fingerprint != fp else r
                 for r in cas.records if not (r.fingerprint == fp and r.state in _LEAVING))
    return add_ca(CaSet(kept), user_ca, now=now)


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
