"""A workload's leaf Secret, decided purely: issue, renew or keep its certificate (serving, `decide_leaf`, or
client, `decide_client_leaf`), wait for a CA that may sign or defer to the namespace's next turn; its seal
(made, opened once a pass) and, from it, when a stored leaf starts, ends and is due (`leaf_window`,
`leaf_renewal_time`); and what the Secret carries of its workloads (the `workloads` note, ownerReferences).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.injection.profile import BUILT_IN, Profile
from tls_injector.kube import SECRETS
from tls_injector.pki import (
    LEAF_VALIDITY,
    Decision,
    Sealed,
    SealedLeaf,
    fingerprint,
    issue_client,
    issue_leaf,
    leaf_renewal,
    load_certificates,
    open_seal,
    renewal_time,
    seal,
    sealed_leaf_renewal,
    sealed_window,
    uri_sans,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.inputs import Signing
from tls_injector.reconcile.core.keystores import Keystore, with_keystore
from tls_injector.reconcile.core.objects import (
    Deferred,
    Obj,
    Outcome,
    Refused,
    Waiting,
    Write,
    annotations_of,
    base_body,
    encode_data,
    secret_data,
    write_if_changed,
)

# What a leaf decision reads of the stored Secret (its ca.crt is compared as stored, never decoded).
_LEAF_KEYS = ("tls.crt", "tls.key")


def decide_client_leaf(target: Target, existing: Obj | None, signing: Signing) -> Outcome:
    """The workload's client certificate: EKU clientAuth only, from the client CA set, its one URI SAN the
    SPIFFE ID; ca.crt the serving CAs (what a client verifies servers with). Issued when missing, or when
    the PKI says renew (expiring, tampered, client CA rotated) or the identity changed; else only ca.crt,
    labels and annotations are kept current. No seal: every pass checks it in full."""
    name = target.client_secret
    if existing is not None and not own.is_owned(existing, "leaf"):
        return Refused(f"Secret {target.namespace}/{name} exists and is not managed by tls-injector")
    client = signing.client
    assert client is not None
    [identity] = target.client_ids
    data = secret_data(existing, keys=_LEAF_KEYS)
    signer = client.signer
    decision = leaf_renewal(cert_pem=data.get("tls.crt"), key_pem=data.get("tls.key"), desired_dns=(),
                            trusted=client.cas.bundle(), now=signing.now, issuer=signer.cert if signer else None,
                            client=True, duration=LEAF_VALIDITY)  # issue_client's: one its CA's end cut short
                            # is renewed at the share of the life it got (renewal.granted_renew_before)
    why: str = decision.reason or ""
    if not decision.renew and uri_sans(load_certificates(data["tls.crt"])[0]) != [identity]:
        why = "sans-changed"
    forced = names.FORCE_RENEW_ANNOTATION in annotations_of(existing)
    ours = {"ca.crt": signing.ca_data}
    issuer = annotations_of(existing).get(names.ISSUER_ANNOTATION, "")
    where = _as_client_secret(target, name)
    reason = "refreshed"
    if why or forced or existing is None:
        if signer is None:
            return _waiting(where, existing, ours, issuer, role="leaf", signing=client, why=why or "force-renew")
        if not _may_issue(signing, target.namespace):
            return _deferred(where, existing, ours, issuer, role="leaf")
        leaf = issue_client(signer, uris=[identity], now=signing.now)
        ours.update(encode_data({"tls.crt": leaf.chain_pem, "tls.key": leaf.key_pem}))
        issuer = fingerprint(signer.cert)
        reason = f"{'renewed' if existing else 'issued'}:{why or 'force-renew'}"
    return write_if_changed(SECRETS, existing, _leaf_body(where, existing, ours, issuer, role="leaf"), reason=reason)


def _as_client_secret(target: Target, secret_name: str) -> Target:
    """The target as the client Secret's: the same namespace and users, under the client Secret's name."""
    return replace(target, secret_name=secret_name, dns_names=(), profile=BUILT_IN, profile_problems=())


def decide_leaf(target: Target, existing: Obj | None, signing: Signing, *, role: own.Role = "leaf",
                keystore: Keystore | None = None) -> Outcome:
    """Issue when missing or when the PKI says renew (expiring, SANs, tampered, CA rotated); else keep the
    certificate and only refresh `ca.crt` and our labels if they drifted. With `keystore`, the JVM keystore
    and truststore follow what the Secret then holds (keystores.with_keystore)."""
    if existing is not None and not own.is_owned(existing, role):
        return Refused(f"Secret {target.namespace}/{target.secret_name} exists and is not managed by tls-injector")
    signer = signing.signer
    sealed = _open_seal(target, existing, signing)
    data = {} if sealed is not None else secret_data(existing, keys=_LEAF_KEYS)  # the seal stands for them
    decision = _leaf_decision(target, data, signing, sealed)
    stored = annotations_of(existing)
    forced = names.FORCE_RENEW_ANNOTATION in stored
    ours = {"ca.crt": signing.ca_data}
    issuer = stored.get(names.ISSUER_ANNOTATION, "")
    sealed_as = stored.get(names.SEAL_ANNOTATION, "")
    reason = ""
    if decision.renew or forced or existing is None:
        if signer is None:
            return _waiting(target, existing, ours, issuer, role=role, signing=signing,
                            why=decision.reason or "force-renew", keystore=keystore)
        if not _may_issue(signing, target.namespace):
            return _deferred(target, existing, ours, issuer, role=role, keystore=keystore)
        profile = target.profile
        key = signing.keys.take(profile.key_algorithm) if signing.keys is not None else None
        if signing.keys is not None and key is None:
            return _deferred(target, existing, ours, issuer, role=role, keystore=keystore, for_key=True)
        leaf = issue_leaf(issuer=signer, dns_names=list(target.dns_names), now=signing.now, validity=profile.duration,
                          key_type=profile.key_algorithm, key=key)
        ours.update(encode_data({"tls.crt": leaf.chain_pem, "tls.key": leaf.key_pem}))
        issuer = fingerprint(signer.cert)
        sealed_as = _seal(target, signing, leaf.chain_pem, leaf.key_pem, leaf.cert)
        reason = f"{'renewed' if existing else 'issued'}:{decision.reason or 'force-renew'}"
    elif sealed is None and signer is not None:
        # Checked in full and kept, so it chains to the signer: seal it, and the next pass need not check again.
        sealed_as = _seal(target, signing, data["tls.crt"], data["tls.key"], load_certificates(data["tls.crt"])[0])
    body = _leaf_body(target, existing, ours, issuer, role=role, keystore=keystore)
    if sealed_as:
        body["metadata"]["annotations"][names.SEAL_ANNOTATION] = sealed_as
        if sealed_as != stored.get(names.SEAL_ANNOTATION):  # sealed just now: leaf_expiry
            # reads it next, and need not compute its HMAC again
            _remember_seal(target, body, sealed_as, signing)
    _note_profile(body, target.profile)
    return write_if_changed(SECRETS, existing, body, reason=reason or "refreshed")


def _note_profile(body: Obj, profile: Profile) -> None:
    """The profile the stored certificate was issued (or, kept, checked) for, where doctor and status read its
    renewal time; none for the built-in one, so no Secret issued before profiles existed is rewritten."""
    annotations = body["metadata"]["annotations"]
    if profile.built_in:
        annotations.pop(names.PROFILE_ANNOTATION, None)
    else:
        annotations[names.PROFILE_ANNOTATION] = profile.note()


def _leaf_decision(target: Target, data: dict[str, bytes], signing: Signing, sealed: Sealed | None) -> Decision:
    """From the seal when it opens (the time is all that is left to judge), else the full check."""
    profile = target.profile
    if sealed is not None:
        return sealed_leaf_renewal(sealed, now=signing.now, lookahead=profile.renew_before, duration=profile.duration,
                                   ca_end=signing.signer_end)
    signer = signing.signer
    return leaf_renewal(cert_pem=data.get("tls.crt"), key_pem=data.get("tls.key"), desired_dns=target.dns_names,
                        trusted=signing.cas.bundle(), now=signing.now, issuer=signer.cert if signer else None,
                        lookahead=profile.renew_before, key_type=profile.key_algorithm, duration=profile.duration)


def _open_seal(target: Target, existing: Obj | None, signing: Signing) -> Sealed | None:
    value = annotations_of(existing).get(names.SEAL_ANNOTATION)
    raw = (existing or {}).get("data") or {}
    cert, key = raw.get("tls.crt"), raw.get("tls.key")
    if signing.seal_key is None or not value or not isinstance(cert, str) or not isinstance(key, str):
        return None
    memo = _seal_memo(target, value, cert, key)
    # One lookup: hashing the memo hashes its DNS names and profile again each time (none caches its hash).
    sealed = signing.opened.get(memo, _UNOPENED)
    if sealed is _UNOPENED:
        data = secret_data(existing, keys=_LEAF_KEYS)
        leaf = SealedLeaf(target.namespace, target.secret_name, data.get("tls.crt", b""), data.get("tls.key", b""),
                          target.dns_names, _sealed_profile(target))
        sealed = open_seal(signing.seal_key, leaf, value) if len(data) == len(_LEAF_KEYS) else None
        _keep_opened(signing, memo, sealed)
    return sealed


# Seals a pass holds opened (Signing.opened): each ~0.4 KiB with its key, so a pass over 100,000 leaves
# that kept them all held ~40 MB more at its peak; a leaf's seal is read again right after its decision.
MAX_OPENED = 1024
_UNOPENED = Sealed(datetime.min, datetime.min)  # not in Signing.opened (where None is a seal that did not open)


def _remember_seal(target: Target, body: Obj, value: str, signing: Signing) -> None:
    """What _open_seal will find for the Secret as written (`body`'s data, as the server stores it)."""
    _keep_opened(signing, _seal_memo(target, value, body["data"]["tls.crt"], body["data"]["tls.key"]),
                 sealed_window(value))


def _seal_memo(target: Target, value: str, cert: str, key: str) -> tuple[Any, ...]:
    """What an opened seal is kept by: everything the seal covers, as the Secret carries it."""
    return target.namespace, target.secret_name, target.dns_names, value, cert, key, target.profile


def _keep_opened(signing: Signing, memo: tuple[Any, ...], sealed: Sealed | None) -> None:
    if len(signing.opened) >= MAX_OPENED:
        signing.opened.clear()
    signing.opened[memo] = sealed


def leaf_window(target: Target, secret: Obj | None, signing: Signing) -> tuple[datetime, datetime] | None:
    """When a stored leaf starts and ends (for metrics and its renewal time): from its seal when it opens,
    else from the certificate."""
    sealed = _open_seal(target, secret, signing)
    if sealed is not None:
        return sealed.not_before, sealed.not_after
    chain = load_certificates(secret_data(secret, keys=("tls.crt",)).get("tls.crt", b""))
    return (chain[0].not_valid_before_utc, chain[0].not_valid_after_utc) if chain else None


def leaf_expiry(target: Target, secret: Obj | None, signing: Signing) -> datetime | None:
    """When a stored leaf ends (for metrics): from its seal when it opens, else from the certificate."""
    window = leaf_window(target, secret, signing)
    return window[1] if window is not None else None


def leaf_renewal_time(target: Target, window: tuple[datetime, datetime], signing: Signing) -> datetime:
    """When the leaf of this window, the signer's (any other is renewed at once), is due for renewal under its
    target's profile, as _leaf_decision decides."""
    profile = target.profile
    return renewal_time(*window, lookahead=profile.renew_before, duration=profile.duration,
                        ca_end=signing.signer_end)


def _seal(target: Target, signing: Signing, cert_pem: bytes, key_pem: bytes, cert: Any) -> str:
    if signing.seal_key is None:
        return ""
    leaf = SealedLeaf(target.namespace, target.secret_name, cert_pem, key_pem, target.dns_names,
                      _sealed_profile(target))
    return seal(signing.seal_key, leaf, not_before=cert.not_valid_before_utc, not_after=cert.not_valid_after_utc)


def _sealed_profile(target: Target) -> str:
    return "" if target.profile.built_in else target.profile.note()


def _may_issue(signing: Signing, namespace: str) -> bool:
    return signing.budget is None or signing.budget.allows(namespace)


def _deferred(target: Target, existing: Obj | None, ours: dict[str, str], issuer: str, *, role: own.Role,
              keystore: Keystore | None = None, for_key: bool = False) -> Deferred:
    """The certificate stays as it is (none yet, or the stored one) until its namespace's next turn."""
    return Deferred(_kept(target, existing, ours, issuer, role=role, keystore=keystore), for_key)


def _kept(target: Target, existing: Obj | None, ours: dict[str, str], issuer: str, *, role: own.Role,
          keystore: Keystore | None = None) -> Write | None:
    """The stored certificate kept, with ca.crt carrying the whole set and a force-renew still to be done."""
    if existing is None:
        return None
    body = _leaf_body(target, existing, ours, issuer, role=role, keystore=keystore)
    forced = annotations_of(existing).get(names.FORCE_RENEW_ANNOTATION)
    if forced is not None:  # still to be done, once a CA may sign (or the namespace's next turn)
        body["metadata"]["annotations"][names.FORCE_RENEW_ANNOTATION] = forced
    return write_if_changed(SECRETS, existing, body, reason="refreshed")


def _waiting(target: Target, existing: Obj | None, ours: dict[str, str], issuer: str, *, role: own.Role,
             signing: Signing, why: str, keystore: Keystore | None = None) -> Waiting:
    """The certificate stays as it is (none yet, or the stored one, still trusted) until a CA may sign."""
    refresh = _kept(target, existing, ours, issuer, role=role, keystore=keystore)
    verb = "issue" if existing is None else f"renewal ({why})"
    return Waiting(f"Secret {target.namespace}/{target.secret_name}: certificate {verb} waits: {signing.waiting}",
                   refresh)


def _leaf_body(target: Target, existing: Obj | None, ours: dict[str, str], issuer: str, *, role: own.Role,
               keystore: Keystore | None = None) -> Obj:
    body = base_body(existing, SECRETS, target.namespace, target.secret_name, role=role)
    body["type"] = (existing or {}).get("type") or "kubernetes.io/tls"
    data = {**((existing or {}).get("data") or {}), **ours}
    body["data"] = with_keystore(data, keystore)  # None (or a client Secret): no keystore keys
    annotations = body["metadata"]["annotations"]
    annotations.pop(names.FORCE_RENEW_ANNOTATION, None)
    annotations[names.WORKLOADS_ANNOTATION] = workloads_note(target.workloads)
    annotations[names.ISSUER_ANNOTATION] = issuer
    references = owner_references(target.workloads)
    if references or body["metadata"].get("ownerReferences"):
        body["metadata"]["ownerReferences"] = references
    return body


# The `workloads` annotation is for people reading the Secret, so it is cut at this many characters, the
# rest counted ("+N more"): a Secret shared by the pods of one generateName lists each pod, and at about
# 3,850 pods the whole list passed the apiserver's 256 KiB limit on an object's annotations (422 on every
# pass, and the pods waiting). The Secret's ownerReferences list them all, up to MAX_OWNER_REFERENCES.
MAX_WORKLOADS_NOTE = 1024


def workloads_note(workloads: Iterable[WorkloadRef]) -> str:
    """`Kind/name,Kind/name,...`, at most MAX_WORKLOADS_NOTE characters: what does not fit is counted."""
    every = [str(w) for w in workloads]
    whole = ",".join(every)
    if len(whole) + len(f" (+{len(every)} more)") <= MAX_WORKLOADS_NOTE:  # no count below can be longer, so
        return whole  # nothing is cut (nearly every Secret at every pass: one workload)
    text = ""
    for index, name in enumerate(every):
        listed = f"{text},{name}" if text else name
        rest = f" (+{len(every) - index - 1} more)" if index + 1 < len(every) else ""
        if len(listed) + len(rest) > MAX_WORKLOADS_NOTE:  # the previous round left room for its own rest
            return f"{text} (+{len(every) - index} more)".lstrip()
        text = listed
    return text


# A Secret used by more workloads than this carries no ownerReferences at all; the reconciler's own
# garbage collection (an owned Secret no workload needs is deleted, with a resourceVersion precondition)
# is then the whole mechanism. Why a bound: a Secret shared by the pods of one generateName (bare pods,
# each its own workload) carried one reference per pod, about 200 bytes each with 63-character names, and
# near 8,000 pods the object passed etcd's request limit (--max-request-bytes, 1.5 MiB by default:
# etcd.io/docs/v3.4/dev-guide/limit); kube-apiserver then answers every write 500 "etcdserver: request is
# too large" (kubernetes/kubernetes#74600, #112152), so the pods waited for a Secret refused on every pass.
# Why 100: a reference is at most about 770 bytes (a 253-character name, a custom resource's 317-character
# apiVersion, a 63-character kind, a uid), so 100 are at most 77 KiB; with the 1 MiB of data and 256 KiB
# of annotations the apiserver's validation already allows, the Secret stays under 1.5 MiB whatever else
# it holds. A Deployment's Secret has one user; a hundred is far past sharing by design.
# Why none rather than some: Kubernetes deletes a dependent once every owner it lists is gone, so listing
# a subset would let the garbage collector delete a Secret still mounted by the unlisted users (the first
# hundred pods of a generateName ending while the rest run). The trade-off: with the reconciler
# uninstalled, a Secret of more than 100 users is never collected by Kubernetes when they go; it stays
# until deleted by hand (docs/install.md#uninstall lists the command) or with its namespace.
MAX_OWNER_REFERENCES = 100


def owner_references(workloads: Iterable[WorkloadRef]) -> list[Obj]:
    """One reference per workload using the Secret, so Kubernetes' garbage collector removes it with the
    last of them, as the reconciler does; none when more than MAX_OWNER_REFERENCES workloads use it (why:
    above). Never `controller` (several workloads may share a Secret, and none of them manages it) and
    `blockOwnerDeletion: false` (deleting a workload must not wait on its Secret; `true` would also need
    `update` on each owner kind's `finalizers`, which the apiserver's OwnerReferencesPermissionEnforcement
    checks). A workload without a uid is left out: a reference with a wrong uid counts as a gone owner.
    The field is ours as a whole, like the rest of the Secret: a stale reference is dropped."""
    references = [{"apiVersion": w.api_version, "kind": w.kind, "name": w.name, "uid": w.uid,
                   "controller": False, "blockOwnerDeletion": False}
                  for w in sorted(workloads, key=lambda w: w.uid) if w.uid]
    return references if len(references) <= MAX_OWNER_REFERENCES else []
