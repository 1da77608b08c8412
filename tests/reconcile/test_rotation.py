"""CA rotation through the trust state machine, checked as a TLS client would after every write batch."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import (
    OWN_NS,
    Clock,
    assert_every_leaf_trusted_by_every_bundle,
    data,
    reconciler,
    small_cluster,
)
from tests.reconcile.test_reconcile_safety import assert_no_ca_key_outside_its_secret
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.pki import bundle_certificates, fingerprint, load_certificates

STATES = ("untrusted", "trusted-unused", "trusted-used", "phase-out", "zombie")


def ca_states(emu: Emulator) -> dict[str, str]:
    stored = data(emu.get("secrets", "tls-injector-ca", OWN_NS))
    return {k.split(".")[0][:8]: k.split(".")[1] for k in stored if k.split(".")[1] in STATES}


def ca_keys(emu: Emulator) -> set[bytes]:
    return {v for k, v in data(emu.get("secrets", "tls-injector-ca", OWN_NS)).items() if k.endswith(".key")}


def force_replace(emu: Emulator) -> None:
    api = KubeApi(emu.api_client())
    ca = api.get(SECRETS, "tls-injector-ca", namespace=OWN_NS)
    ca["metadata"]["annotations"] = {**(ca["metadata"].get("annotations") or {}), "tls-injector.io/force-replace": "1"}
    api.replace(SECRETS, ca)


def rotate(emu: Emulator, clock: Clock, *, crash_after: int | None = None) -> tuple[list[dict[str, str]], set[bytes]]:
    """Passes 6 minutes apart (past the 5-minute settle) until one CA is left and nothing changes. With
    `crash_after`, every pass is first attempted by a process that dies after that many writes."""
    (old,) = ca_states(emu)
    history, keys = [ca_states(emu)], ca_keys(emu)
    for _ in range(20):
        clock.advance(timedelta(minutes=6))
        if crash_after is not None:
            budget = itertools.count()
            reconciler(emu, clock, may_write=lambda b=budget: next(b) < crash_after).run_pass()
            assert_every_leaf_trusted_by_every_bundle(emu, clock.now)
            keys |= ca_keys(emu)
        report = reconciler(emu, clock).run_pass()  # a new process each time: it resumes from what is stored
        assert report.converged, report
        assert_every_leaf_trusted_by_every_bundle(emu, clock.now)
        keys |= ca_keys(emu)
        if history[-1] != ca_states(emu):
            history.append(ca_states(emu))
        if report.write_count == 0 and old not in ca_states(emu):
            return history, keys
    raise AssertionError(f"the rotation did not finish: {history}")


def test_a_forced_replacement_walks_both_cas_through_every_state_and_never_breaks_trust(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    (old,) = ca_states(kubeapi)
    force_replace(kubeapi)
    history, keys = rotate(kubeapi, clock)
    (new,) = ca_states(kubeapi)
    assert [h.get(old, "removed") for h in history] == [
        "trusted-used", "trusted-used", "trusted-used", "phase-out", "zombie", "removed"]
    assert [h.get(new, "-") for h in history] == [
        "-", "untrusted", "trusted-unused", "trusted-used", "trusted-used", "trusted-used"]
    assert assert_every_leaf_trusted_by_every_bundle(kubeapi, clock.now) == len(secrets)
    assert len(keys) == 2
    assert_no_ca_key_outside_its_secret(kubeapi, keys, home=("tls-injector-ca",))


@pytest.mark.parametrize("crash_after", [0, 1, 2, 5])
def test_a_crash_after_any_write_of_a_rotation_resumes_and_never_breaks_trust(
    kubeapi: Emulator, crash_after: int
) -> None:
    small_cluster(kubeapi, namespaces=2, per_namespace=2)
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    force_replace(kubeapi)
    history, _ = rotate(kubeapi, clock, crash_after=crash_after)
    assert len(ca_states(kubeapi)) == 1
    assert len(history) >= 4


def test_an_expiring_ca_is_rotated_without_being_asked(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    (old,) = ca_states(kubeapi)
    clock.advance(timedelta(days=365 - 59))  # inside the CA's 60-day renewal window
    history, _ = rotate(kubeapi, clock)
    assert old not in ca_states(kubeapi)
    assert len(history) >= 5


def test_a_new_ca_signs_only_after_every_bundle_has_carried_it_for_the_settle_time_even_after_a_crash(
    kubeapi: Emulator,
) -> None:
    small_cluster(kubeapi, namespaces=2, per_namespace=2)
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    (old,) = ca_states(kubeapi)
    force_replace(kubeapi)
    budget = itertools.count()
    reconciler(kubeapi, clock, may_write=lambda: next(budget) < 1).run_pass()  # dies right after the CA write
    clock.advance(timedelta(minutes=5))  # down for longer than the settle time: no bundle has the new CA
    everywhere_at = signing_at = None
    for _ in range(30):
        clock.advance(timedelta(minutes=1))
        assert reconciler(kubeapi, clock).run_pass().converged
        new = next(fp for fp in ca_states(kubeapi) if fp != old) if len(ca_states(kubeapi)) > 1 else None
        if everywhere_at is None and new and all(new in held for held in _held_everywhere(kubeapi)):
            everywhere_at = clock.now
        if signing_at is None and any(_issuer(s).startswith(new or "-") for s in _leaves(kubeapi)):
            signing_at = clock.now
    assert everywhere_at is not None
    assert signing_at is not None
    assert signing_at - everywhere_at >= timedelta(minutes=5)


def _leaves(emu: Emulator) -> list[dict[str, object]]:
    return [s for s in emu.objects("secrets")
            if (s["metadata"].get("labels") or {}).get("tls-injector.io/role") == "leaf"]


def _issuer(secret: dict[str, object]) -> str:
    meta = secret["metadata"]
    assert isinstance(meta, dict)
    return str(meta["annotations"]["tls-injector.io/issuer"])[:8]


def _held_everywhere(emu: Emulator) -> list[set[str]]:
    """For every bundle in use (each ConfigMap and each leaf's ca.crt): the 8-hex prefixes of its CAs."""
    bundles = [bundle_certificates(cm.get("data") or {}) for cm in emu.objects("configmaps")
               if cm["metadata"]["name"] == "tls-injector-trust-bundle"]
    bundles += [load_certificates(data(s)["ca.crt"]) for s in _leaves(emu)]
    return [{fingerprint(c)[:8] for c in b} for b in bundles]
