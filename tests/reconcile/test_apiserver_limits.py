"""What the reconciler writes fits the apiserver's rules at real-world sizes (the emulator enforces them as
the apiserver does: tests/kubeapi/validation.py and certificates.py), so nothing is refused on every pass."""

from __future__ import annotations

import pytest

from app import names
from app.reconcile import podcerts
from app.reconcile.plan import MAX_WORKLOADS_NOTE
from tests.kubeapi import Emulator, running_emulator
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler

PODS = 4_000  # the case: past ~3,850 pods of 63-character names the list passed 256 KiB
STEM = "nightly-report-generator-for-the-billing-and-invoicing-te"  # 57: generateName is at most 58 kept


def test_a_secret_shared_by_the_pods_of_one_generate_name_is_written_with_a_bounded_list(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "jobs")
    assert len(STEM) == 57
    for n in range(PODS):
        kubeapi.add({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{STEM}-{n:05d}", "generateName": f"{STEM}-", "namespace": "jobs",
                                  "labels": {"tls-injector.io/inject": "true"}},
                     "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.converged, report.failed[:3]
    secret = kubeapi.get("secrets", f"{STEM}-tls", "jobs")
    assert secret is not None
    note = secret["metadata"]["annotations"][names.WORKLOADS_ANNOTATION]
    assert len(note) <= MAX_WORKLOADS_NOTE
    assert note.startswith(f"Pod/{STEM}-00000,Pod/{STEM}-00001,")
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


def test_a_pod_certificate_for_a_thousand_names_is_denied_with_a_reason_and_nothing_is_refused() -> None:
    """About 950 service names made a chain over the 100 KiB the API accepts (refused on every pass, the
    pod never starting): such a request is answered, Denied with the reason, and the emulator accepts that."""
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
        assert denied["type"] == "Denied"
        assert "tls-injector.io/service-names" in denied["message"]
        assert kubelet.condition(emu, fine)["type"] == "Issued"


def test_a_chain_over_the_limit_is_denied_as_too_large_rather_than_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself, which real names no longer reach (at most 16 Services): with the limit lowered
    under one ordinary chain, the request is Denied CertificateTooLarge, and that answer is accepted."""
    monkeypatch.setattr(podcerts, "MAX_CERTIFICATE_CHAIN", 500)
    clock = Clock()
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        request = kubelet.request(emu, kubelet.pod(emu, "web", "demo"))
        assert reconciler(emu, clock).run_pass().converged
        denied = kubelet.condition(emu, request)
        assert (denied["type"], denied["reason"]) == ("Denied", "CertificateTooLarge")
        assert "over the 500 the API accepts" in denied["message"]

