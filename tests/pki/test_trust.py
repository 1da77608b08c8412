"""The CA trust state machine: transitions, persisted form, and the invariant through rotations."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization

from tests.pki.conftest import NOW
from tests.pki.sim import Cluster
from tls_injector.pki import (
    SETTLE,
    CaSet,
    CaState,
    CertKey,
    TrustFacts,
    add_ca,
    advance,
    decode,
    encode,
    fingerprint,
    make_ca,
    rotation_due,
)

_PEM = serialization.Encoding.PEM

S = CaState
SECOND = timedelta(seconds=1)


def _facts(*, everywhere: set[str] = frozenset(), used: set[str] = frozenset()) -> TrustFacts:  # type: ignore[assignment]
    return TrustFacts(frozenset(everywhere), frozenset(used))


def test_the_first_ca_signs_at_once_and_a_second_starts_untrusted(ca: CertKey, other_ca: CertKey) -> None:
    first = add_ca(CaSet(), ca, now=NOW)
    assert first.states() == {fingerprint(ca.cert): S.TRUSTED_USED}
    assert first.signer() is not None
    assert first.signer().key_pem == ca.key_pem
    second = add_ca(first, other_ca, now=NOW)
    assert second.states() == {fingerprint(ca.cert): S.TRUSTED_USED, fingerprint(other_ca.cert): S.UNTRUSTED}
    assert second.signer() is not None
    assert second.signer().cert == ca.cert
    assert {fingerprint(c) for c in second.bundle()} == {fingerprint(ca.cert), fingerprint(other_ca.cert)}
    assert add_ca(second, other_ca, now=NOW) is second  # the same CA again: nothing to do


def test_a_rotation_walks_every_state_only_when_its_fact_is_observed(ca: CertKey, other_ca: CertKey) -> None:
    old, new = fingerprint(ca.cert), fingerprint(other_ca.cert)
    cas = add_ca(add_ca(CaSet(), ca, now=NOW), other_ca, now=NOW)
    t = NOW + SETTLE
    steps = [
        # (facts observed, time, expected states after the step)
        (_facts(used={old}), t, {old: S.TRUSTED_USED, new: S.UNTRUSTED}),  # bundle not everywhere yet
        (_facts(everywhere={old, new}, used={old}), t - SECOND, {old: S.TRUSTED_USED, new: S.UNTRUSTED}),
        (_facts(everywhere={old, new}, used={old}), t, {old: S.TRUSTED_USED, new: S.TRUSTED_UNUSED}),
        (_facts(everywhere={old, new}, used={old}), t, {old: S.PHASE_OUT, new: S.TRUSTED_USED}),
        (_facts(everywhere={old, new}, used={old, new}), t, {old: S.PHASE_OUT, new: S.TRUSTED_USED}),
        (_facts(everywhere={old, new}, used={new}), t, {old: S.ZOMBIE, new: S.TRUSTED_USED}),
        (_facts(everywhere={old, new}, used={new}), t + SETTLE - SECOND, {old: S.ZOMBIE, new: S.TRUSTED_USED}),
        (_facts(everywhere={old, new}, used={new}), t + SETTLE, {new: S.TRUSTED_USED}),
    ]
    for facts, now, expected in steps:
        cas = advance(cas, facts, now=now)
        assert cas.states() == expected, (facts, now)
        assert encode(decode(encode(cas))) == encode(cas)  # every step survives a restart exactly
    signer = cas.signer()
    assert signer is not None
    assert (signer.cert, signer.key_pem) == (other_ca.cert, other_ca.key_pem)


def test_a_zombie_loses_its_key_and_never_signs_again(ca: CertKey, other_ca: CertKey) -> None:
    cas = add_ca(add_ca(CaSet(), ca, now=NOW), other_ca, now=NOW)
    cas = add_ca(cas, make_ca(common_name="third", now=NOW), now=NOW)  # supersedes the pending one
    zombie = next(r for r in cas.records if r.fingerprint == fingerprint(other_ca.cert))
    assert zombie.state is S.ZOMBIE
    assert zombie.key is None
    assert f"{fingerprint(other_ca.cert)}.key" not in encode(cas)


def test_expired_phase_out_cas_leave_the_set_even_if_a_leaf_still_names_them(ca: CertKey, other_ca: CertKey) -> None:
    old = fingerprint(ca.cert)
    cas = add_ca(add_ca(CaSet(), ca, now=NOW), other_ca, now=NOW)
    everywhere = _facts(everywhere={old, fingerprint(other_ca.cert)}, used={old})
    cas = advance(advance(cas, everywhere, now=NOW + SETTLE), everywhere, now=NOW + SETTLE)
    assert cas.states()[old] is S.PHASE_OUT
    assert old in advance(cas, everywhere, now=ca.cert.not_valid_after_utc - timedelta(seconds=1)).states()
    assert old not in advance(cas, everywhere, now=ca.cert.not_valid_after_utc).states()


@pytest.mark.parametrize(
    ("shift", "pending", "due"),
    [
        (timedelta(days=0), False, False),
        (timedelta(days=305) - timedelta(seconds=1), False, False),  # 365 - 60 days, one second short
        (timedelta(days=305), False, True),
        (timedelta(days=305), True, False),  # a successor is already on its way
    ],
)
def test_a_rotation_is_due_sixty_days_before_the_signer_ends(
    ca: CertKey, other_ca: CertKey, shift: timedelta, pending: bool, due: bool
) -> None:
    cas = add_ca(CaSet(), ca, now=NOW)
    cas = add_ca(cas, other_ca, now=NOW) if pending else cas
    assert rotation_due(cas, now=ca.cert.not_valid_before_utc + timedelta(minutes=5) + shift) is due
    assert rotation_due(CaSet(), now=NOW) is True


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d, fp: d.pop(f"{fp}.crt"), "missing"),
        (lambda d, fp: d.pop(f"{fp}.trusted-used"), "no .*<state> key"),
        (lambda d, fp: d.update({f"{fp}.trusted-used": b"yesterday"}), "ISO-8601"),
        (lambda d, fp: d.update({f"{fp}.trusted-used": b"2026-01-01T00:00:00"}), "UTC offset"),
        (lambda d, fp: d.update({f"{fp}.bogus": b""}), "unknown suffix"),
        (lambda d, fp: d.update({f"{fp}.key": make_ca(common_name="x", now=NOW).key_pem}), "does not belong"),
    ],
)
def test_a_hand_edited_ca_secret_is_refused_naming_the_key(ca: CertKey, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = encode(add_ca(CaSet(), ca, now=NOW))
    mutate(data, fingerprint(ca.cert))
    with pytest.raises(ValueError, match=message):
        decode(data)


def test_two_state_keys_for_one_ca_resolve_to_the_earlier_state(ca: CertKey) -> None:
    fp = fingerprint(ca.cert)
    data = {**encode(add_ca(CaSet(), ca, now=NOW)), f"{fp}.phase-out": NOW.isoformat().encode(), "tls.crt": b"x"}
    assert decode(data).states() == {fp: S.TRUSTED_USED}


@pytest.mark.parametrize("seed", range(2))
def test_every_leaf_in_use_verifies_against_every_bundle_in_use_at_every_step_of_a_rotation(seed: int) -> None:
    """Passes every 6 hours that crash or conflict part-way at random, through one CA rotation."""
    rng = random.Random(seed)
    cluster = Cluster.bootstrap(NOW, ca_age=timedelta(days=300))  # a rotation is due in five days
    for _ in range(4 * 75):
        cluster.reconcile(rng, write_state=0.7, propagate=0.3, reissue=0.3)
        assert cluster.untrusted_pairs() == [], cluster.now
        cluster.tick(timedelta(hours=6))
    assert cluster.cas_made == 2  # the rotation happened, so the check above saw it
    assert cluster.reasons.get("ca-rotated", 0) >= 2
    assert len(decode(cluster.ca_secret).records) == 1  # and it finished: the old CA is gone


def test_mangled_bundles_and_leaves_in_the_cluster_hold_a_rotation_back_without_failing(
    ca: CertKey, other_ca: CertKey
) -> None:
    from tls_injector.pki import bundle_certificates, issue_leaf, load_certificates, observe

    cas = add_ca(add_ca(CaSet(), ca, now=NOW), other_ca, now=NOW)
    good = bundle_certificates({"ca-bundle.crt": b"".join(c.public_bytes(_PEM) for c in cas.bundle()).decode()})
    mangled = bundle_certificates({"ca-bundle.crt": "-----BEGIN CERTIFICATE-----\nnot a cert\n"})
    leaf = load_certificates(issue_leaf(issuer=ca, dns_names=["web"], now=NOW).chain_pem)
    facts = observe(cas, bundles=[good, mangled], leaves=[leaf, load_certificates(b"\x00garbage")])
    assert facts == TrustFacts(in_every_bundle=frozenset(), leaf_issuers=frozenset({fingerprint(ca.cert)}))
    both = {fingerprint(ca.cert), fingerprint(other_ca.cert)}
    assert observe(cas, bundles=[good], leaves=[leaf]).in_every_bundle == both
