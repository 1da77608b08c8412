"""The reconciler against the API emulator, through the official client over HTTP."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import (
    Clock,
    assert_every_leaf_trusted_by_every_bundle,
    ca_fingerprints,
    data,
    reconciler,
    small_cluster,
)
from tls_injector.kube import DEPLOYMENTS, SECRETS, KubeApi
from tls_injector.names import TRUST_BUNDLE_CONFIGMAP
from tls_injector.pki import load_certificates
from tls_injector.pki.verify import dns_sans


@pytest.fixture
def kube(kubeapi: Emulator) -> KubeApi:
    """The test's own client, for changes made "by someone else"."""
    return KubeApi(kubeapi.api_client())


def test_a_first_pass_issues_everything_and_a_second_pass_writes_nothing(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=3, per_namespace=2)
    clock = Clock()
    first = reconciler(kubeapi, clock).run_pass()
    assert first.converged
    assert first.writes["create"] == 1 + len(secrets) + 3  # the CA, a leaf per workload, a bundle per namespace
    for ns, name in secrets:
        assert set(data(kubeapi.get("secrets", name, ns))) == {"tls.crt", "tls.key", "ca.crt"}
    assert assert_every_leaf_trusted_by_every_bundle(kubeapi, clock.now) == len(secrets)

    kubeapi.reset_log()
    second = reconciler(kubeapi, clock).run_pass()  # a fresh process: nothing remembered
    assert (second.converged, second.write_count) == (True, 0)
    assert kubeapi.writes() == []


def test_a_deleted_secret_is_recreated(kubeapi: Emulator, kube: KubeApi) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=2)
    rec = reconciler(kubeapi, Clock())
    rec.run_pass()
    kube.delete(SECRETS, "app0-tls", namespace="ns0")
    report = rec.run_pass()
    assert (dict(report.writes), dict(report.reasons)) == ({"create": 1}, {"issued:missing": 1})
    assert kubeapi.get("secrets", "app0-tls", "ns0") is not None


def test_changed_service_names_reissue_the_certificate_with_the_new_sans(kubeapi: Emulator, kube: KubeApi) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    rec = reconciler(kubeapi, Clock())
    rec.run_pass()
    before = data(kubeapi.get("secrets", "app0-tls", "ns0"))
    workload = kube.get(DEPLOYMENTS, "app0", namespace="ns0")
    workload["spec"]["template"]["metadata"]["annotations"] = {"tls-injector.io/service-names": "api,app0"}
    kube.replace(DEPLOYMENTS, workload)
    report = rec.run_pass()
    assert dict(report.reasons) == {"renewed:sans-changed": 1}
    after = data(kubeapi.get("secrets", "app0-tls", "ns0"))
    assert after["tls.crt"] != before["tls.crt"]
    assert "api.ns0.svc.cluster.local" in dns_sans(load_certificates(after["tls.crt"])[0])


def test_a_409_on_every_first_write_still_converges_and_loses_no_one_elses_keys(
    kubeapi: Emulator, kube: KubeApi
) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    clock = Clock()
    # Creates carry no name in the URL, so the emulator's per-object fault cannot target them: instead the
    # CA's create is refused twice and the first leaf and bundle creates once, with 409, as if someone
    # had created the object and deleted it again in between.
    kubeapi.fail_next("create", "secrets", namespace="tls-injector", count=2, code=409)
    kubeapi.fail_next("create", "secrets", namespace="ns0", code=409)
    kubeapi.fail_next("create", "configmaps", code=409)
    first = reconciler(kubeapi, clock).run_pass()
    assert first.converged
    assert all(kubeapi.get("secrets", name, ns) for ns, name in secrets)
    assert sum(w.code == 409 for w in kubeapi.writes()) == 4
    assert len(ca_fingerprints(kubeapi)) == 1

    # Every first update and delete of each object now gets a plain 409: re-read, decide again, write.
    clock.advance(timedelta(days=60))  # every leaf is inside its 35-day renewal window now
    kubeapi.conflict_on_first_write(verbs=("update", "delete"))
    kubeapi.reset_log()
    renewal = reconciler(kubeapi, clock).run_pass()
    assert renewal.converged
    assert renewal.reasons["renewed:expiring"] == len(secrets)
    assert sum(w.code == 409 for w in kubeapi.writes()) == len(secrets)

    # Now every update meets a concurrent writer that changes the object first (a real 409 on our stale
    # resourceVersion); what that writer added must still be there after we converge.
    kubeapi.clear_faults()
    for ns, _ in secrets[::2]:
        workload = kube.get(DEPLOYMENTS, "app0", namespace=ns)
        workload["spec"]["template"]["metadata"]["annotations"] = {"tls-injector.io/service-names": "renamed"}
        kube.replace(DEPLOYMENTS, workload)
    kubeapi.conflict_on_first_write(verbs=("update",), touch=True)
    kubeapi.reset_log()
    second = reconciler(kubeapi, clock).run_pass()
    assert second.converged
    assert second.reasons["renewed:sans-changed"] == 2
    assert sum(w.code == 409 for w in kubeapi.writes()) == 2
    for ns, _ in secrets[::2]:
        stored = kubeapi.get("secrets", "app0-tls", ns)
        assert stored is not None
        assert Emulator.touch_annotation in stored["metadata"]["annotations"]  # the other writer's change
        assert f"renamed.{ns}.svc" in dns_sans(load_certificates(data(stored)["tls.crt"])[0])
    kubeapi.clear_faults()
    assert reconciler(kubeapi, clock).run_pass().write_count == 0


@pytest.mark.parametrize("code", [403, 422, 500])
def test_one_object_failing_does_not_stop_the_others_and_the_next_pass_repairs_it(kubeapi: Emulator,
                                                                                   code: int) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    kubeapi.fail_next("create", "secrets", namespace="ns0", code=code)
    rec = reconciler(kubeapi, Clock())
    first = rec.run_pass()
    assert not first.converged
    assert len(first.failed) == 1
    # A pass sends its creates from two threads, so the fault meets whichever of ns0's creates comes first.
    (victim,) = [w for w in ("app0", "app1") if first.failed[0].startswith(f"Secret ns0/{w}-tls: create")]
    assert kubeapi.get("secrets", f"{victim}-tls", "ns0") is None
    assert sum(kubeapi.get("secrets", name, ns) is not None for ns, name in secrets) == len(secrets) - 1
    failed_events = [e for e in kubeapi.objects("events", "ns0") if e["reason"] == "CertificateFailed"]
    assert [e["involvedObject"]["name"] for e in failed_events] == [victim]
    second = rec.run_pass()
    assert second.converged
    assert dict(second.reasons) == {"issued:missing": 1}


def test_a_thousand_certificates_issued_in_one_namespace_in_one_pass_are_one_event_there(kubeapi: Emulator) -> None:
    """Routine issuance is counted and aggregated: one Normal Event per namespace and pass, on its trust
    bundle, its message within the 1,024 characters an Event keeps; none on the workloads."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1000)
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.reasons["issued:missing"] == 1000
    [event] = kubeapi.objects("events", "ns0")
    assert (event["reason"], event["type"]) == ("CertificatesIssued", "Normal")
    assert event["involvedObject"] == {"kind": "ConfigMap", "namespace": "ns0", "name": TRUST_BUNDLE_CONFIGMAP,
                                       "uid": "", "apiVersion": "v1"}
    head, _, listed = event["message"].partition(": ")
    assert head == "1000 certificates issued or renewed"
    *named, more = listed.split("; ")
    assert 10 <= len(named) < 20, named
    assert all(re.fullmatch(r"Secret app\d+-tls: certificate issued \(missing\)", n) for n in named), named
    assert more == f"and {1000 - len(named)} more"
    assert len(event["message"]) <= 1024


def test_a_refusal_beside_routine_issuance_keeps_its_own_event_on_its_workload(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=3)
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": "app1-tls", "namespace": "ns0"}, "data": {}})
    reconciler(kubeapi, Clock()).run_pass()
    found = sorted((e["reason"], e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
                   for e in kubeapi.objects("events", "ns0"))
    assert found == [("CertificatesIssued", "Normal", "ConfigMap", TRUST_BUNDLE_CONFIGMAP),
                     ("SecretConflict", "Warning", "Deployment", "app1")]
    [issued] = [e["message"] for e in kubeapi.objects("events", "ns0") if e["reason"] == "CertificatesIssued"]
    assert issued.startswith("2 certificates issued or renewed: ")
    assert sorted(issued.partition(": ")[2].split("; ")) == [
        "Secret app0-tls: certificate issued (missing)", "Secret app2-tls: certificate issued (missing)"]


def test_each_namespace_of_a_pass_gets_its_own_event_and_a_pass_with_nothing_issued_none(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=3, per_namespace=2)
    rec = reconciler(kubeapi, Clock())
    rec.run_pass()
    assert sorted(e["metadata"]["namespace"] for e in kubeapi.objects("events")) == ["ns0", "ns1", "ns2"]
    assert rec.run_pass().write_count == 0
    assert len(kubeapi.objects("events")) == 3
