"""The desired state, computed purely: for every object the reconciler cares about, a `decide` function
from what is stored now (or None) to the write that would converge it (or None when it is converged).

Keeping the decision per object lets the applier re-read and re-decide one object after a 409 instead
of overwriting it blindly, and makes a converged cluster cost zero writes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from tls_injector import names
from tls_injector.injection.profile import BUILT_IN, Profile
from tls_injector.kube import CONFIG_MAPS, SECRETS, Oversized, Resource
from tls_injector.names import (
    BUNDLE_KEY,
    CLIENT_BUNDLE_KEY,
    CLIENT_TRUSTSTORE_KEY,
    TRUST_BUNDLE_CONFIGMAP,
    TRUSTSTORE_KEY,
)
from tls_injector.pki import (
    LEAF_VALIDITY,
    CaSet,
    CertKey,
    Decision,
    Sealed,
    SealedLeaf,
    fingerprint,
    issue_client,
    issue_leaf,
    leaf_renewal,
    load_certificates,
    open_seal,
    public_roots,
    renewal_time,
    seal,
    seal_key,
    sealed_leaf_renewal,
    sealed_window,
    to_truststore,
    trust_bundle,
    truststore_fingerprints,
    uri_sans,
    with_public_roots,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.budget import TurnBudget
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.keypool import KeyPool
from tls_injector.reconcile.core.keystores import Keystore, with_keystore

Obj = dict[str, Any]
Action = Literal["create", "update", "delete"]
# What a leaf decision reads of the stored Secret (its ca.crt is compared as stored, never decoded).
_LEAF_KEYS = ("tls.crt", "tls.key")
# Keys of the bundle ConfigMap that are ours: the whole bundle and one per CA (16 hex digits of SHA-256),
# for the serving CAs (`ca-`) and the client CAs (`client-ca-`, docs/mtls.md).
_BUNDLE_KEYS = re.compile(r"^(client-)?ca-(bundle|[0-9a-f]{16})\.crt$")
CLIENT_PREFIX = CLIENT_BUNDLE_KEY.removesuffix("-bundle.crt")


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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Signing:
    """The CA set of this pass with its signer; `bundle` is the trust bundle's ConfigMap data.

    `signer` is None while no CA may sign (a replaced user CA whose successor is not trusted everywhere
    yet); `waiting` then says why, and certificates that need a signature wait (`Waiting`).
    """

    cas: CaSet
    signer: CertKey | None
    bundle: dict[str, str]
    now: datetime
    waiting: str = ""
    seal_key: bytes | None = None  # the signer's key for leaf seals (app/pki/seal.py)
    # Seals opened in this pass, by what they were opened on: a pass decides a leaf, then reports its expiry
    # (or decides it again after a 409), so only the last few are read again; at most MAX_OPENED are held.
    opened: dict[tuple[Any, ...], Sealed | None] = field(default_factory=dict, compare=False, repr=False)
    # The client CA set's bundle keys (`client-ca-bundle.crt`, ...) the trust bundle ConfigMap carries too,
    # and the client CA set itself (None while no workload asks for a client certificate; docs/mtls.md).
    client: Signing | None = None
    # What each namespace may still spend of this turn of the loop (budget.py); None: no bound (`--once`).
    budget: TurnBudget | None = field(default=None, compare=False, repr=False)
    # The loop's keys made ahead (keypool.py); None: each key made at the call.
    keys: KeyPool | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(cas: CaSet, *, now: datetime, waiting: str = "", prefix: str = "ca",
           anchors: Sequence[Any] = ()) -> Signing:
        """`anchors`: roots every bundle carries besides the set's own (a member's federation roots)."""
        signer = cas.signer()
        why = "" if signer is not None else waiting or "no CA may sign yet"
        key = seal_key(signer) if signer is not None else None
        return Signing(cas, signer, trust_bundle([*cas.bundle(), *anchors], now=now, prefix=prefix), now, why, key)

    @property
    def client_bundle(self) -> dict[str, str]:
        return self.client.bundle if self.client is not None else {}

    @property
    def bundle_pem(self) -> str:
        return self.bundle[BUNDLE_KEY]


@dataclass
class Observed:
    """What a pass read: opted-in candidates and the objects we own, keyed by namespace (and name)."""

    workloads: list[tuple[str, Obj]] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    enabled: set[str] = field(default_factory=set)
    # Our leaf Secrets by (namespace, name): a dict from a list; the loop's cache reads each when asked.
    leaves: Mapping[tuple[str, str], Obj] = field(default_factory=dict)
    bundles: dict[str, Obj] = field(default_factory=dict)
    # Namespaces where a ConfigMap of the bundle's name exists that is not ours: never written, and left
    # out of the CA's rotation facts (docs/security.md), so one tenant cannot hold every rotation back.
    squatted: set[str] = field(default_factory=set)
    # The Services of namespaces where something opted in: their selectors name workloads' pods.
    services: list[Obj] = field(default_factory=list)
    truststores: set[str] = field(default_factory=set)  # namespaces where a workload asks for truststore.p12
    # Objects left out as larger than what their kind holds (read.py): (kind, which, the cap it is over).
    oversized: list[tuple[str, Oversized, int]] = field(default_factory=list)
    # Namespaces where an opted-in workload or pod asks for trust alone (names.MODE_TRUST_ONLY): no Secret,
    # but the bundle, as in an enabled namespace.
    trust_only: set[str] = field(default_factory=set)
    # Secrets whose workloads ask for a JVM keystore (names.KEYSTORE_ANNOTATION), with its password.
    keystores: dict[tuple[str, str], Keystore] = field(default_factory=dict)
    # Namespaces whose bundle carries the public roots too (names.PUBLIC_ROOTS: labelled so, or a workload asks).
    public_roots: set[str] = field(default_factory=set)

    @property
    def bundle_wanted(self) -> set[str]:
        """Namespaces that need the bundle whatever their workloads' Secrets (bundle_namespaces adds those)."""
        return self.enabled | self.trust_only

    def lookup(self, item: Item) -> Obj | None:
        if item.resource is SECRETS:
            return self.leaves.get((item.namespace, item.name))
        return self.bundles.get(item.namespace) if item.name == TRUST_BUNDLE_CONFIGMAP else None


def plan(targets: Iterable[Target], observed: Observed, signing: Signing) -> list[Item]:
    """Every leaf Secret and bundle ConfigMap to converge, and every one of ours no longer needed."""
    targets = list(targets)
    items = [_leaf_item(t, signing, observed.keystores.get((t.namespace, t.secret_name))) for t in targets]
    if signing.client is not None:
        items += [_client_item(t, signing) for t in targets if t.client_wanted]
    wanted = {(t.namespace, t.secret_name) for t in targets} | client_secrets(targets)
    items += [_orphan(SECRETS, ns, name, "leaf") for (ns, name) in sorted(observed.leaves) if (ns, name) not in wanted]
    namespaces = bundle_namespaces(targets, observed.bundle_wanted)
    items += [_bundle_item(ns, signing, truststore=ns in observed.truststores, public=ns in observed.public_roots)
              for ns in sorted(namespaces)]
    items += [_orphan(CONFIG_MAPS, ns, TRUST_BUNDLE_CONFIGMAP, "bundle")
              for ns in sorted(observed.bundles) if ns not in namespaces]
    return items


def client_secrets(targets: Iterable[Target]) -> set[tuple[str, str]]:
    """(namespace, name) of every client Secret the targets want: one identity each. A refused one (users of
    different service accounts) is not wanted: one issued before is deleted, as a serving certificate whose
    names are all refused is, rather than kept unrefreshed (its ca.crt would hold CA rotations back)."""
    return {(t.namespace, t.client_secret) for t in targets if t.client_wanted}


def _client_item(target: Target, signing: Signing) -> Item:
    return Item(SECRETS, target.namespace, target.client_secret,
                lambda existing: decide_client_leaf(target, existing, signing), target.workloads, client=True)


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
    forced = names.FORCE_RENEW_ANNOTATION in _annotations(existing)
    ours = {"ca.crt": signing.bundle_pem.encode()}
    issuer = _annotations(existing).get(names.ISSUER_ANNOTATION, "")
    where = _as_client_secret(target, name)
    reason = "refreshed"
    if why or forced or existing is None:
        if signer is None:
            return _waiting(where, existing, ours, issuer, role="leaf", signing=client, why=why or "force-renew")
        if not _may_issue(signing, target.namespace):
            return _deferred(where, existing, ours, issuer, role="leaf")
        leaf = issue_client(signer, uris=[identity], now=signing.now)
        ours.update({"tls.crt": leaf.chain_pem, "tls.key": leaf.key_pem})
        issuer = fingerprint(signer.cert)
        reason = f"{'renewed' if existing else 'issued'}:{why or 'force-renew'}"
    return _write_if_changed(SECRETS, existing, _leaf_body(where, existing, ours, issuer, role="leaf"), reason=reason)


def _as_client_secret(target: Target, secret_name: str) -> Target:
    """The target as the client Secret's: the same namespace and users, under the client Secret's name."""
    return replace(target, secret_name=secret_name, dns_names=(), profile=BUILT_IN, profile_problems=())


def bundle_namespaces(targets: Iterable[Target], enabled: set[str]) -> set[str]:
    """Namespaces with opted-in workloads, plus those labelled enabled (pods may arrive there any time)."""
    return {t.namespace for t in targets} | enabled


def _leaf_item(target: Target, signing: Signing, keystore: Keystore | None = None) -> Item:
    """A target with no name left (its workload's own name is no Service name and no Service selects its
    pods) is issued all the same, a certificate naming nothing (certs.NAMELESS_SUBJECT), so its pods start
    rather than wait for a Secret; one issued before for other names is replaced, so no name that may not
    be named outlives the change, as when it was deleted."""
    return Item(SECRETS, target.namespace, target.secret_name,
                lambda existing: decide_leaf(target, existing, signing, keystore=keystore), target.workloads)


def _bundle_item(namespace: str, signing: Signing, *, truststore: bool = False, public: bool = False) -> Item:
    return Item(CONFIG_MAPS, namespace, TRUST_BUNDLE_CONFIGMAP,
                lambda existing: decide_bundle(namespace, existing, signing, truststore=truststore, public=public))


def _orphan(resource: Resource, namespace: str, name: str, role: own.Role) -> Item:
    def decide(existing: Obj | None) -> Outcome:
        if existing is None or not own.is_owned(existing, role):
            return None  # already gone, or someone took it over: not ours to delete any more
        rv = existing["metadata"].get("resourceVersion", "")
        return Write("delete", resource, namespace, name, resource_version=rv, reason="no longer needed")

    return Item(resource, namespace, name, decide)


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
    forced = names.FORCE_RENEW_ANNOTATION in _annotations(existing)
    ours = {"ca.crt": signing.bundle_pem.encode()}
    issuer = _annotations(existing).get(names.ISSUER_ANNOTATION, "")
    sealed_as = _annotations(existing).get(names.SEAL_ANNOTATION, "")
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
        ours.update({"tls.crt": leaf.chain_pem, "tls.key": leaf.key_pem})
        issuer = fingerprint(signer.cert)
        sealed_as = _seal(target, signing, ours["tls.crt"], ours["tls.key"], leaf.cert)
        reason = f"{'renewed' if existing else 'issued'}:{decision.reason or 'force-renew'}"
    elif sealed is None and signer is not None:
        # Checked in full and kept, so it chains to the signer: seal it, and the next pass need not check again.
        sealed_as = _seal(target, signing, data["tls.crt"], data["tls.key"], load_certificates(data["tls.crt"])[0])
    body = _leaf_body(target, existing, ours, issuer, role=role, keystore=keystore)
    if sealed_as:
        body["metadata"]["annotations"][names.SEAL_ANNOTATION] = sealed_as
        if sealed_as != _annotations(existing).get(names.SEAL_ANNOTATION):  # sealed just now: leaf_expiry
            # reads it next, and need not compute its HMAC again
            _remember_seal(target, body, sealed_as, signing)
    _note_profile(body, target.profile)
    return _write_if_changed(SECRETS, existing, body, reason=reason or "refreshed")


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
                                   ca_end=_signer_end(signing))
    signer = signing.signer
    return leaf_renewal(cert_pem=data.get("tls.crt"), key_pem=data.get("tls.key"), desired_dns=target.dns_names,
                        trusted=signing.cas.bundle(), now=signing.now, issuer=signer.cert if signer else None,
                        lookahead=profile.renew_before, key_type=profile.key_algorithm, duration=profile.duration)


def _open_seal(target: Target, existing: Obj | None, signing: Signing) -> Sealed | None:
    value = _annotations(existing).get(names.SEAL_ANNOTATION)
    raw = (existing or {}).get("data") or {}
    cert, key = raw.get("tls.crt"), raw.get("tls.key")
    if signing.seal_key is None or not value or not isinstance(cert, str) or not isinstance(key, str):
        return None
    memo = _seal_memo(target, value, cert, key)
    if memo not in signing.opened:
        data = secret_data(existing, keys=_LEAF_KEYS)
        leaf = SealedLeaf(target.namespace, target.secret_name, data.get("tls.crt", b""), data.get("tls.key", b""),
                          target.dns_names, _sealed_profile(target))
        _keep_opened(signing, memo, open_seal(signing.seal_key, leaf, value) if len(data) == len(_LEAF_KEYS) else None)
    return signing.opened[memo]


# Seals a pass holds opened (Signing.opened): each ~0.4 KiB with its key, so a pass over 100,000 leaves
# that kept them all held ~40 MB more at its peak; a leaf's seal is read again right after its decision.
MAX_OPENED = 1024


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
                        ca_end=_signer_end(signing))


def _signer_end(signing: Signing) -> datetime | None:
    return signing.signer.cert.not_valid_after_utc if signing.signer is not None else None


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


def _deferred(target: Target, existing: Obj | None, ours: dict[str, bytes], issuer: str, *, role: own.Role,
              keystore: Keystore | None = None, for_key: bool = False) -> Deferred:
    """The certificate stays as it is (none yet, or the stored one) until its namespace's next turn."""
    return Deferred(_kept(target, existing, ours, issuer, role=role, keystore=keystore), for_key)


def _kept(target: Target, existing: Obj | None, ours: dict[str, bytes], issuer: str, *, role: own.Role,
          keystore: Keystore | None = None) -> Write | None:
    """The stored certificate kept, with ca.crt carrying the whole set and a force-renew still to be done."""
    if existing is None:
        return None
    body = _leaf_body(target, existing, ours, issuer, role=role, keystore=keystore)
    forced = _annotations(existing).get(names.FORCE_RENEW_ANNOTATION)
    if forced is not None:  # still to be done, once a CA may sign (or the namespace's next turn)
        body["metadata"]["annotations"][names.FORCE_RENEW_ANNOTATION] = forced
    return _write_if_changed(SECRETS, existing, body, reason="refreshed")


def _waiting(target: Target, existing: Obj | None, ours: dict[str, bytes], issuer: str, *, role: own.Role,
             signing: Signing, why: str, keystore: Keystore | None = None) -> Waiting:
    """The certificate stays as it is (none yet, or the stored one, still trusted) until a CA may sign."""
    refresh = _kept(target, existing, ours, issuer, role=role, keystore=keystore)
    verb = "issue" if existing is None else f"renewal ({why})"
    return Waiting(f"Secret {target.namespace}/{target.secret_name}: certificate {verb} waits: {signing.waiting}",
                   refresh)


def decide_bundle(namespace: str, existing: Obj | None, signing: Signing, *, truststore: bool = False,
                  public: bool = False) -> Outcome:
    """Our keys replaced wholesale (a removed CA's key disappears), anyone else's keys kept; with
    `truststore`, binaryData `truststore.p12` holds the same CAs as PKCS#12; with `public`, the key
    names.PUBLIC_BUNDLE_KEY holds them followed by the public roots, the annotation saying their source."""
    if existing is not None and not own.is_owned(existing, "bundle"):
        return Refused(f"ConfigMap {namespace}/{TRUST_BUNDLE_CONFIGMAP} exists and is not managed by tls-injector")
    body = _base_body(existing, CONFIG_MAPS, namespace, TRUST_BUNDLE_CONFIGMAP, role="bundle")
    kept = {k: v for k, v in ((existing or {}).get("data") or {}).items()
            if not _BUNDLE_KEYS.match(k) and k != names.PUBLIC_BUNDLE_KEY}
    body["data"] = {**kept, **signing.bundle, **signing.client_bundle}
    body["metadata"]["annotations"].pop(names.PUBLIC_ROOTS_SOURCE_ANNOTATION, None)
    if public:
        text, digest = public_bundle(signing.bundle_pem)
        body["data"][names.PUBLIC_BUNDLE_KEY] = text
        body["metadata"]["annotations"][names.PUBLIC_ROOTS_SOURCE_ANNOTATION] = public_roots().source
        stored = ((existing or {}).get("data") or {}).get(names.PUBLIC_BUNDLE_KEY)
        if existing is not None and stored == digest and _same(existing, _with_public(body, digest)):
            return None  # read as its digest (read.bundle_shape): the same text, nothing else changed
    binary = _binary_data(existing, signing, truststore=truststore)
    if binary:
        body["binaryData"] = binary
    else:
        body.pop("binaryData", None)
    return _write_if_changed(CONFIG_MAPS, existing, body, reason="bundle")


# What a pass holds of the public bundle it read: its digest, not its ~180 KB (read.bundle_shape).
DIGEST_PREFIX = "sha256:"


def public_digest(text: str) -> str:
    return DIGEST_PREFIX + hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def public_bundle(bundle_pem: str) -> tuple[str, str]:
    """Our CAs and the public roots as one file, and its digest: made once per CA set, not per namespace
    (a pass has one bundle, two while a member's federation roots differ; 8 is ample)."""
    text = with_public_roots(bundle_pem)
    return text, public_digest(text)


def _with_public(body: Obj, value: str) -> Obj:
    return {**body, "data": {**body["data"], names.PUBLIC_BUNDLE_KEY: value}}


def _binary_data(existing: Obj | None, signing: Signing, *, truststore: bool) -> dict[str, str]:
    """Anyone else's binaryData kept; ours are the truststores, each rebuilt only when its CAs differ from
    its PEM bundle's (PKCS#12 bytes change on every build: random salts), dropped when nobody asks for them:
    `truststore.p12` the serving CAs, `client-truststore.p12` the client CAs while a client CA set is in use."""
    binary = dict((existing or {}).get("binaryData") or {})
    current = {key: binary.pop(key, None) for key in (TRUSTSTORE_KEY, CLIENT_TRUSTSTORE_KEY)}
    if not truststore:
        return binary
    for key, pem in ((TRUSTSTORE_KEY, signing.bundle.get(BUNDLE_KEY, "")),
                     (CLIENT_TRUSTSTORE_KEY, signing.client_bundle.get(CLIENT_BUNDLE_KEY, ""))):
        cas = load_certificates(pem.encode())
        if not cas:
            continue
        kept = current[key]
        stored = base64.b64decode(kept, validate=False) if isinstance(kept, str) else b""
        if stored and truststore_fingerprints(stored) == {fingerprint(c) for c in cas}:
            binary[key] = str(kept)
        else:
            binary[key] = base64.b64encode(to_truststore(cas)).decode()
    return binary


def secret_data(secret: Obj | None, *, keys: Iterable[str] | None = None) -> dict[str, bytes]:
    """A Secret's data decoded (the API carries it base64-encoded), all of it or only `keys`; undecodable
    values are left out."""
    data = (secret or {}).get("data") or {}
    decoded: dict[str, bytes] = {}
    for key, value in (data.items() if keys is None else ((k, data[k]) for k in keys if k in data)):
        try:
            decoded[key] = base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            continue  # tampered: treated as missing, so the certificate is re-issued
    return decoded


def encode_data(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def _leaf_body(target: Target, existing: Obj | None, ours: dict[str, bytes], issuer: str, *, role: own.Role,
               keystore: Keystore | None = None) -> Obj:
    body = _base_body(existing, SECRETS, target.namespace, target.secret_name, role=role)
    body["type"] = (existing or {}).get("type") or "kubernetes.io/tls"
    data = {**((existing or {}).get("data") or {}), **encode_data(ours)}
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


def _base_body(existing: Obj | None, resource: Resource, namespace: str, name: str, *, role: own.Role) -> Obj:
    """A copy of the stored object's top level and metadata (so other writers' fields survive) with our labels."""
    body = {**(existing or {}), "apiVersion": "v1", "kind": resource.kind}  # list items carry neither
    meta = dict(body.get("metadata") or {"name": name, "namespace": namespace})
    meta["labels"] = {**(meta.get("labels") or {}), **own.owner_labels(role)}
    meta["annotations"] = dict(meta.get("annotations") or {})
    body["metadata"] = meta
    return body


def _write_if_changed(resource: Resource, existing: Obj | None, body: Obj, *, reason: str) -> Write | None:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if existing is None:
        return Write("create", resource, namespace, name, body, reason=reason)
    if _same(existing, body):
        return None
    return Write("update", resource, namespace, name, body, existing["metadata"]["resourceVersion"], reason)


def _same(existing: Obj, body: Obj) -> bool:
    old, new = existing.get("metadata") or {}, body["metadata"]
    return (
        existing.get("data") == body.get("data")
        and (existing.get("binaryData") or {}) == (body.get("binaryData") or {})
        and (old.get("labels") or {}) == new["labels"]
        and (old.get("annotations") or {}) == new["annotations"]
        and (old.get("ownerReferences") or []) == (new.get("ownerReferences") or [])
    )


def _annotations(obj: Obj | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}
