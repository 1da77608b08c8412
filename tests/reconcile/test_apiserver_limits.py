"""What the reconciler writes fits the apiserver's rules at real-world sizes (the emulator enforces them as
the apiserver does: tests/kubeapi/validation.py and certificates.py), so nothing is refused on every pass."""

from __future__ import annotations

import base64
import json

import jsonpatch
import pytest

from tests.kubeapi import Emulator, errors, running_emulator
from tests.kubeapi.store import stored_size
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tests.support.kubelet import NODE, Kubelet
from tests.support.reviews import answer, review
from tls_injector import names
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.pki import load_certificates
from tls_injector.reconcile.core.discover import WorkloadRef
from tls_injector.reconcile.core.leaves import MAX_OWNER_REFERENCES, MAX_WORKLOADS_NOTE, owner_references
from tls_injector.reconcile.native import podcerts

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
    assert "ownerReferences" not in secret["metadata"], f"over {MAX_OWNER_REFERENCES} users: none, by design"


def test_a_small_list_is_written_whole() -> None:
    from tls_injector.reconcile.core.discover import WorkloadRef
    from tls_injector.reconcile.core.leaves import workloads_note

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



SHARED = 9_000  # one reference per pod (about 200 bytes each) passed etcd's 1.5 MiB near 8,000 pods


def test_nine_thousand_pods_of_one_generate_name_share_a_secret_that_every_write_fits(kubeapi: Emulator) -> None:
    """The pods a webhook-injected generateName makes (bare pods, each its own workload) all mount one
    Secret. With one ownerReference each, that Secret passed etcd's request limit and every pass was
    refused (500 "etcdserver: request is too large", which the emulator answers as a cluster does); now
    it carries none past MAX_OWNER_REFERENCES users, every write is accepted, and the pods' volumes resolve."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "jobs")
    template = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": f"{STEM}-", "namespace": "jobs",
                             "labels": {"tls-injector.io/inject": "true"}},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}], "nodeName": NODE}}
    reply = answer(make_mutate_handler(InjectionOptions()), review(obj=template, namespace="jobs"))
    injected = jsonpatch.apply_patch(template, json.loads(base64.b64decode(reply["patch"])))
    for n in range(SHARED):  # straight into the store: 9,000 creates over HTTP would be most of the test
        kubeapi.add({**injected, "metadata": {**injected["metadata"], "name": f"{STEM}-{n:05d}"}})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.converged, report.failed[:3]
    refused = [w for w in kubeapi.writes() if w.code >= 300]
    assert not refused, refused[:3]
    secret = kubeapi.get("secrets", f"{STEM}-tls", "jobs")
    assert secret is not None
    assert "ownerReferences" not in secret["metadata"]
    assert stored_size(kubeapi.store.get(kubeapi.resource("secrets"), "jobs", f"{STEM}-tls")) < (
        errors.MAX_STORED_OBJECT // 8), "bounded by construction, nowhere near the limit"
    node = Kubelet(kubeapi)
    for name in (f"{STEM}-00000", f"{STEM}-{SHARED - 1:05d}"):
        pod = kubeapi.get("pods", name, "jobs")
        assert pod is not None
        files = node.container_files(pod, "app")
        [leaf] = [f for path, f in files.items() if path.endswith("/tls.crt")]
        assert load_certificates(leaf.content), "the container sees the issued certificate"


def _users(count: int) -> list[WorkloadRef]:
    return [WorkloadRef("Pod", "jobs", f"p-{n:04d}", f"uid-{n:04d}", "v1") for n in range(count)]


def test_each_user_is_a_reference_up_to_the_bound_and_none_past_it() -> None:
    """Past the bound none rather than some: Kubernetes deletes a dependent once every owner it lists is
    gone, so a subset would let it delete a Secret the unlisted users still mount."""
    at_bound = owner_references(_users(MAX_OWNER_REFERENCES))
    assert [r["uid"] for r in at_bound] == [f"uid-{n:04d}" for n in range(MAX_OWNER_REFERENCES)]
    assert owner_references(_users(MAX_OWNER_REFERENCES + 1)) == []


def test_the_references_come_back_when_the_users_fall_to_the_bound(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "jobs")
    for n in range(MAX_OWNER_REFERENCES + 1):
        kubeapi.add({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"dbg-{n:05d}", "generateName": "dbg-", "namespace": "jobs",
                                  "labels": {"tls-injector.io/inject": "true"}},
                     "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}})
    run = reconciler(kubeapi, Clock())
    assert run.run_pass().converged
    secret = kubeapi.get("secrets", "dbg-tls", "jobs")
    assert secret is not None
    assert "ownerReferences" not in secret["metadata"]
    kubeapi.store.delete(kubeapi.resource("pods"), "jobs", "dbg-00000")
    assert run.run_pass().converged
    secret = kubeapi.get("secrets", "dbg-tls", "jobs")
    assert secret is not None
    assert len(secret["metadata"]["ownerReferences"]) == MAX_OWNER_REFERENCES
