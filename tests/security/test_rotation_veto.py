"""Issue 24, finding 2: one namespace's bundle that cannot be written does not hold every rotation back.

Before: a ConfigMap named `tls-injector-trust-bundle` that is not ours counted as a bundle in use that
lacks the new CA, so the new CA never signed; a year on, the old CA expired and every leaf with it. Now
that namespace is left out of the rotation facts and reported. Passes of the real reconciler three days apart,
each a new process (as `reconcile --once`), against the API emulator, through more than a year.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tests.reconcile.test_rotation import ca_states, force_replace
from tls_injector.pki import bundle_certificates, load_certificates, verify_server

BUNDLE = "tls-injector-trust-bundle"
# Passes three days apart: every CA step needs only a pass past the 5-minute settle, and the CA's last 60
# days hold twenty passes; daily passes would prove nothing more and take three times as long.
PASS_EVERY = timedelta(days=3)


def _squat(emu: Emulator, ns: str) -> None:
    namespace(emu, ns)
    deployment(emu, "squatter", ns)
    emu.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": BUNDLE, "namespace": ns},
             "data": {"ca-bundle.crt": "not ours"}})


def _ours(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "tls-injector"


def _every_leaf_trusted(emu: Emulator, clock: Clock) -> int:
    """Every leaf of ours verifies as a TLS client would, at `now`, against every bundle of ours."""
    bundles = [bundle_certificates(cm.get("data") or {}) for cm in emu.objects("configmaps")
               if cm["metadata"]["name"] == BUNDLE and _ours(cm)]
    leaves = [s for s in emu.objects("secrets")
              if (s["metadata"].get("labels") or {}).get("tls-injector.io/role") == "leaf"]
    for secret in leaves:
        chain = load_certificates(data(secret)["tls.crt"])
        host = f"{secret['metadata']['name'].removesuffix('-tls')}.{secret['metadata']['namespace']}.svc"
        for trusted in bundles:
            verify_server(chain[0], chain[1:], trusted=trusted, dns_name=host, now=clock.now)
    return len(leaves)


def test_a_squatted_bundle_does_not_stop_a_year_of_rotation(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    for ns in ("team-a", "team-b"):
        namespace(kubeapi, ns)
        deployment(kubeapi, "web", ns)
    _squat(kubeapi, "team-x")
    clock = Clock()
    cas_seen: list[str] = []
    for _ in range(134):  # 402 days
        report = reconciler(kubeapi, clock).run_pass()
        assert not report.aborted, report
        assert "team-x" in report.excluded
        assert _every_leaf_trusted(kubeapi, clock) == 3
        cas_seen += [fp for fp in ca_states(kubeapi) if fp not in cas_seen]
        clock.advance(PASS_EVERY)
    assert len(cas_seen) == 2  # the first CA was replaced once, inside its last 60 days
    assert cas_seen[0] not in ca_states(kubeapi)
    # The squatter was never written, and its workload was told why, once.
    squatter = kubeapi.get("configmaps", BUNDLE, "team-x")
    assert squatter["data"] == {"ca-bundle.crt": "not ours"}
    told = [e for e in kubeapi.objects("events") if e["reason"] == "TrustBundleExcluded"]
    assert {e["involvedObject"]["name"] for e in told} == {"squatter"}
    assert "CA rotation goes on without this namespace" in told[0]["message"]


def test_a_bundle_the_api_server_refuses_is_left_out_after_one_pass(kubeapi: Emulator) -> None:
    """A write failure (here: the API server answers 422 to our bundle in team-x) excludes the namespace
    from the next pass of the same reconciler, and the forced rotation completes."""
    namespace(kubeapi, OWN_NS)
    for ns in ("team-a", "team-x"):
        namespace(kubeapi, ns)
        deployment(kubeapi, "web", ns)
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    assert rec.run_pass().converged
    kubeapi.faults.fail_next("update", "configmaps", code=422, namespace="team-x", count=10_000)
    force_replace(kubeapi)
    (old,) = ca_states(kubeapi)
    for _ in range(15):
        clock.advance(timedelta(minutes=6))
        rec.run_pass()
    assert old not in ca_states(kubeapi)
    assert "team-x" in rec.run_pass().excluded
