"""What the reconciler writes fits the apiserver's rules at real-world sizes (the emulator enforces them as
the apiserver does: tests/kubeapi/validation.py and certificates.py), so nothing is refused on every pass."""

from __future__ import annotations

from app.reconcile import ownership as own
from app.reconcile.plan import MAX_WORKLOADS_NOTE
from app.reconcile.podcerts import MAX_CERTIFICATE_CHAIN
from tests.kubeapi import Emulator, running_emulator
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler

PODS = 4_000  # the case: past ~3,850 pods the full list passed 256 KiB of annotations


def test_a_secret_shared_by_the_pods_of_one_generate_name_is_written_with_a_bounded_list(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "jobs")
    for n in range(PODS):
        kubeapi.add({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"dbg-{n:05d}", "generateName": "dbg-", "namespace": "jobs",
                                  "labels": {"tls-injector.io/inject": "true"}},
                     "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.converged, report.failed[:3]
    secret = kubeapi.get("secrets", "dbg-tls", "jobs")
    assert secret is not None
    note = secret["metadata"]["annotations"][own.WORKLOADS_ANNOTATION]
    assert len(note) <= MAX_WORKLOADS_NOTE
    assert note.startswith("Pod/dbg-00000,Pod/dbg-00001,")
    shown = note.count("Pod/")
    assert note.endswith(f" (+{PODS - shown} more)")
    assert len(secret["metadata"]["ownerReferences"]) == PODS, "every user is still a reference"


def test_a_small_list_is_written_whole() -> None:
    from app.reconcile.discover import WorkloadRef
    from app.reconcile.plan import workloads_note

    refs = [WorkloadRef("Deployment", "shop", name) for name in ("api", "web")]
    assert workloads_note(refs) == "Deployment/api,Deployment/web"
    exact = [WorkloadRef("Pod", "shop", "p" * (MAX_WORKLOADS_NOTE - 4))]
    assert workloads_note(exact) == f"Pod/{'p' * (MAX_WORKLOADS_NOTE - 4)}"


def test_a_pod_certificate_for_more_names_than_the_api_can_hold_is_denied_with_the_reason() -> None:
    clock = Clock()
    services = ",".join(f"svc-{n:04d}" for n in range(1_000))
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        too_many = kubelet.request(emu, kubelet.pod(emu, "web", "demo",
                                                    annotations={"tls-injector.io/service-names": services}))
        fine = kubelet.request(emu, kubelet.pod(emu, "api", "demo"))
        report = reconciler(emu, clock).run_pass()
        assert report.converged, report.failed[:3]
        denied = kubelet.condition(emu, too_many)
        assert (denied["type"], denied["reason"]) == ("Denied", "CertificateTooLarge")
        assert f"over the {MAX_CERTIFICATE_CHAIN} the API accepts" in denied["message"]
        assert "4000 DNS names" in denied["message"]
        assert kubelet.condition(emu, fine)["type"] == "Issued"
