"""The CA trust state machine: replace a CA without a moment where some client rejects some server.

Each CA moves forward through five states, one step per `advance` call, each step taken only on facts
the reconciler observed in the cluster (never on what it remembers having done):

    UNTRUSTED       in the bundles being written, not yet in every bundle in use; signs nothing
    TRUSTED_UNUSED  in every bundle in use for at least SETTLE; signs nothing yet
    TRUSTED_USED    the one CA that signs new leaves
    PHASE_OUT       replaced; still trusted; its leaves are being re-issued ("ca-rotated")
    ZOMBIE          no leaf chains to it any more; kept in bundles for SETTLE so pods still serving a
                    just-replaced leaf stay trusted; key dropped
    (removed)       gone from the set, hence from the bundles

Every CA that is in the set is in the bundles, so the invariant "every leaf in use verifies against every
bundle in use" holds at every step: a CA signs only once every bundle trusts it, and leaves only
leave bundles once no leaf uses it.

Persisted form (the CA Secret's data, one atomic write per step, so a crash at any point leaves either
the old or the new state): `<fp>.crt` (certificate and its issuers, PEM), `<fp>.key` (private key,
absent for a zombie) and `<fp>.<state>` whose value is the ISO-8601 time the state was entered.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cryptography import x509

from tls_injector.pki.certs import CertKey, fingerprint, issued_by, key_matches, load_certificates, to_pem
from tls_injector.pki.keys import PrivateKey, key_from_pem, key_to_pem
from tls_injector.pki.renewal import CA_LOOKAHEAD

# Kubelet refreshes projected Secret/ConfigMap volumes within its sync period (1 min) plus its cache
# TTL (1 min); 5 minutes leaves room for a slow node and for the workload to reload the files.
SETTLE = timedelta(minutes=5)
# The range an operator may set it to (`reconcile --ca-settle`, docs/reconcile.md "The settle"). The settle
# is what lets every kubelet sync a new bundle before the new CA signs, and the last re-issued leaves before
# the old CA leaves: below a kubelet's own worst case at its defaults (the sync period plus the cache TTL,
# 2 minutes) a rotation could break handshakes on a node that is merely on time; the delay measured on a
# real node was 24-82 s (docs/node-tests.md). Above 10 minutes a rotation waits longer than the shipped
# TLSInjectorCARotationStuck alert allows a CA to stay on its way in (30 minutes: 20 to reach every bundle,
# then 10 trusted-unused), so every rotation would page someone; a slower kubelet than that is a node to fix.
MIN_SETTLE = timedelta(minutes=2)
MAX_SETTLE = timedelta(minutes=10)


class CaState(enum.StrEnum):
    UNTRUSTED = "untrusted"
    TRUSTED_UNUSED = "trusted-unused"
    TRUSTED_USED = "trusted-used"
    PHASE_OUT = "phase-out"
    ZOMBIE = "zombie"


_ORDER = list(CaState)
_PENDING = (CaState.UNTRUSTED, CaState.TRUSTED_UNUSED)


@dataclass(frozen=True)
class CaRecord:
    cert: x509.Certificate
    key: PrivateKey | None
    state: CaState
    since: datetime
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.cert)

    @property
    def anchor(self) -> x509.Certificate:
        return self.chain[-1] if self.chain else self.cert

    def moved(self, state: CaState, now: datetime) -> CaRecord:
        key = None if state is CaState.ZOMBIE else self.key  # a zombie never signs again
        return replace(self, state=state, since=now, key=key)


@dataclass(frozen=True)
class CaSet:
    """The CAs of one trust domain, oldest first. Immutable: transitions return a new set."""

    records: tuple[CaRecord, ...] = ()

    def bundle(self) -> list[x509.Certificate]:
        """What every trust bundle must hold: the anchor of every CA in the set, whatever its state."""
        return [r.anchor for r in self.records]

    def signer(self) -> CertKey | None:
        """The CA that signs new leaves (TRUSTED_USED), None while there is none."""
        for r in self.records:
            if r.state is CaState.TRUSTED_USED and r.key is not None:
                return CertKey(r.cert, r.key, r.chain)
        return None

    def in_state(self, state: CaState) -> list[CaRecord]:
        return [r for r in self.records if r.state is state]

    def states(self) -> dict[str, CaState]:
        return {r.fingerprint: r.state for r in self.records}


@dataclass(frozen=True)
class TrustFacts:
    """What the reconciler observed: both sets hold CA fingerprints (`CaRecord.fingerprint`)."""

    in_every_bundle: frozenset[str]  # CAs whose anchor is in every trust bundle in use
    leaf_issuers: frozenset[str]  # CAs that some leaf in use (a cert Secret) chains to


def observe(
    cas: CaSet, *, bundles: Iterable[Sequence[x509.Certificate]], leaves: Iterable[Sequence[x509.Certificate]]
) -> TrustFacts:
    """Facts from the bundles and served chains (leaf + intermediates) found in the cluster."""
    bundle_fps = [{fingerprint(c) for c in b} for b in bundles]
    chains = _readable(leaves)
    every = {r.fingerprint for r in cas.records if all(fingerprint(r.anchor) in b for b in bundle_fps)}
    used = {r.fingerprint for r in cas.records if any(_chains_to(chain, r.cert) for chain in chains)}
    return TrustFacts(frozenset(every), frozenset(used))


def add_ca(cas: CaSet, ca: CertKey, *, now: datetime) -> CaSet:
    """Start trusting a new CA (generated, or provided by the user) that will replace the signer.

    The very first CA signs at once: no leaf and no bundle exist yet, so there is nothing to keep
    working. A successor still pending from an earlier rotation is superseded: it never signed, so it
    can go straight to ZOMBIE. Adding a CA already in the set changes nothing.
    """
    if any(r.fingerprint == fingerprint(ca.cert) for r in cas.records):
        return cas
    state = CaState.TRUSTED_USED if not cas.records else CaState.UNTRUSTED
    kept = tuple(r.moved(CaState.ZOMBIE, now) if r.state in _PENDING else r for r in cas.records)
    return _ordered((*kept, CaRecord(ca.cert, ca.key, state, now, ca.chain)))


def swap_signer(cas: CaSet, ca: CertKey, *, now: datetime) -> CaSet | None:
    """A new intermediate under the anchor the signer already chains to: it signs at once and the signer
    phases out; None when `ca` is not such a CA (then it joins through `add_ca` like any other).

    Safe without the propagation wait because bundles carry anchors only (`CaSet.bundle`): the anchor is
    the same, it has been in every bundle in use since the signer was promoted, and no bundle changes.
    That is how a member moves to a renewed intermediate from its hub (docs/multicluster.md).
    """
    signer = next((r for r in cas.records if r.state is CaState.TRUSTED_USED), None)
    if signer is None or not ca.chain or not signer.chain or fingerprint(ca.anchor) != fingerprint(signer.anchor):
        return None
    if any(r.fingerprint == fingerprint(ca.cert) for r in cas.records):
        return None
    kept = tuple(r.moved(CaState.PHASE_OUT, now) if r is signer else
                 r.moved(CaState.ZOMBIE, now) if r.state in _PENDING else r for r in cas.records)
    return _ordered((*kept, CaRecord(ca.cert, ca.key, CaState.TRUSTED_USED, now, ca.chain)))


def adopt_orphans(
    cas: CaSet, *, bundles: Iterable[Sequence[x509.Certificate]], leaves: Iterable[Sequence[x509.Certificate]],
    now: datetime,
) -> CaSet:
    """Keep trusting the CAs that signed what is still served, when the set itself has forgotten them.

    Only for a trust set whose bundles and leaves no tenant can write (the webhook's: the webhook
    configurations' caBundles and the serving Secret in the injector's namespace). Never for the workload
    CA, whose bundles and leaf Secrets live in tenants' namespaces (docs/security.md).

    That happens when the CA Secret is lost (deleted by hand, restored from an old backup): a new CA
    must be made, but the pods keep serving their current leaves until they pick up re-issued ones.
    Any CA certificate found in a bundle in use that a served chain chains to, and that the set does
    not hold, joins as a ZOMBIE (no key: it never signs again), so it stays in the bundles for SETTLE
    and then leaves them like any replaced CA. Expired CAs verify nothing and are not adopted.
    """
    known = {r.fingerprint for r in cas.records}
    chains = _readable(leaves)
    found: dict[str, x509.Certificate] = {}
    for bundle in bundles:
        for ca in bundle:
            fp = fingerprint(ca)
            if fp in known or now >= ca.not_valid_after_utc or not any(_chains_to(c, ca) for c in chains):
                continue
            found[fp] = ca
    if not found:
        return cas
    return _ordered((*cas.records, *(CaRecord(ca, None, CaState.ZOMBIE, now) for ca in found.values())))


def rotation_due(cas: CaSet, *, now: datetime, lookahead: timedelta = CA_LOOKAHEAD) -> bool:
    """A new CA is needed: none signs, or the signer ends within `lookahead`, and none is on its way."""
    if any(r.state in _PENDING for r in cas.records):
        return False
    signer = cas.signer()
    return signer is None or now + lookahead >= signer.cert.not_valid_after_utc


def advance(cas: CaSet, facts: TrustFacts, *, now: datetime, settle: timedelta = SETTLE) -> CaSet:
    """One step for every CA whose facts allow it; the same set when nothing moves (write nothing)."""
    promote = _successor(cas)
    records: list[CaRecord] = []
    for r in cas.records:
        nxt = _next_state(r, facts, promote=promote, now=now, settle=settle)
        if nxt is not None:
            records.append(r if nxt is r.state else r.moved(nxt, now))
    return _ordered(records)


def _successor(cas: CaSet) -> str | None:
    """The newest TRUSTED_UNUSED CA: promoted now, together with the demotion of the current signer."""
    ready = cas.in_state(CaState.TRUSTED_UNUSED)
    return ready[-1].fingerprint if ready else None


def _next_state(  # noqa: PLR0911 - one return per transition reads like the table in the docstring
    r: CaRecord, facts: TrustFacts, *, promote: str | None, now: datetime, settle: timedelta
) -> CaState | None:
    """The record's state after this step; None when it leaves the set."""
    settled = now - r.since >= settle
    expired = now >= r.cert.not_valid_after_utc
    match r.state:
        case CaState.UNTRUSTED if r.fingerprint in facts.in_every_bundle and settled:
            return CaState.TRUSTED_UNUSED
        case CaState.TRUSTED_UNUSED if r.fingerprint == promote:
            return CaState.TRUSTED_USED
        case CaState.TRUSTED_USED if promote is not None:
            return CaState.PHASE_OUT
        case CaState.PHASE_OUT | CaState.ZOMBIE if expired:
            return None  # it verifies nothing any more; its leaves ended with it (they are capped)
        case CaState.PHASE_OUT if r.fingerprint not in facts.leaf_issuers:
            return CaState.ZOMBIE
        case CaState.ZOMBIE if settled:
            return None
    return r.state


def _ordered(records: Iterable[CaRecord]) -> CaSet:
    return CaSet(tuple(sorted(records, key=lambda r: (r.cert.not_valid_before_utc, r.fingerprint))))


def _readable(leaves: Iterable[Sequence[x509.Certificate]]) -> Sequence[Sequence[x509.Certificate]]:
    """Chains read more than once (once per CA): a sequence as it is (certs.Chains parses each only when
    it is first read, which with one CA is the first alone), anything else listed."""
    return leaves if isinstance(leaves, Sequence) else list(leaves)


def _chains_to(chain: Sequence[x509.Certificate], ca: x509.Certificate) -> bool:
    return any(cert == ca or issued_by(cert, ca) for cert in chain)


# --- persisted form ---------------------------------------------------------------------------------

_KEY = re.compile(r"^(?P<fp>[0-9a-f]{64})\.(?P<suffix>[a-z-]+)$")


def encode(cas: CaSet) -> dict[str, bytes]:
    """The CA Secret's data for this set (values raw; the Kubernetes client base64-encodes them)."""
    data: dict[str, bytes] = {}
    for r in cas.records:
        data[f"{r.fingerprint}.crt"] = to_pem((r.cert, *r.chain))
        if r.key is not None:
            data[f"{r.fingerprint}.key"] = key_to_pem(r.key)
        data[f"{r.fingerprint}.{r.state.value}"] = r.since.isoformat().encode()
    return data


def decode(data: Mapping[str, bytes]) -> CaSet:
    """The set stored in a CA Secret's data; keys not of the `<sha256>.<suffix>` form are ignored.

    ValueError names the offending key when the data is inconsistent (e.g. edited by hand).
    """
    grouped: dict[str, dict[str, bytes]] = {}
    for name, value in data.items():
        match = _KEY.match(name)
        if match:
            grouped.setdefault(match["fp"], {})[match["suffix"]] = value
    return _ordered(_decode_record(fp, parts) for fp, parts in grouped.items())


def _decode_record(fp: str, parts: dict[str, bytes]) -> CaRecord:
    unknown = set(parts) - {"crt", "key", *(s.value for s in CaState)}
    if unknown:
        raise ValueError(f"CA Secret key {fp}.{sorted(unknown)[0]}: unknown suffix")
    certs = load_certificates(parts.get("crt", b""))
    if not certs or fingerprint(certs[0]) != fp:
        raise ValueError(f"CA Secret key {fp}.crt: missing, or its certificate has another fingerprint")
    # Two state keys cannot come from one atomic write; if edited so, take the earliest: repeating a
    # step is safe, skipping one (e.g. a propagation check) is not.
    states = [s for s in _ORDER if s.value in parts]
    if not states:
        raise ValueError(f"CA Secret has {fp}.crt but no {fp}.<state> key")
    key = key_from_pem(parts["key"]) if "key" in parts else None
    if key is not None and not key_matches(certs[0], key):
        raise ValueError(f"CA Secret key {fp}.key does not belong to {fp}.crt")
    since = _parse_since(f"{fp}.{states[0].value}", parts[states[0].value])
    return CaRecord(certs[0], key, states[0], since, tuple(certs[1:]))


def _parse_since(name: str, value: bytes) -> datetime:
    try:
        since = datetime.fromisoformat(value.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"CA Secret key {name}: not an ISO-8601 time") from e
    if since.tzinfo is None:
        raise ValueError(f"CA Secret key {name}: the time has no UTC offset")
    return since
