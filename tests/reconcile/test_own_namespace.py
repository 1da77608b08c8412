"""The injector's own namespace is labelled enabled so the trust bundle is mirrored there (the webhook
mounts it), not so its own objects get certificates: there, only a pod template labelled "true" asks for
one. The shipped objects (the bootstrap Job included) are never issued a certificate nor counted by doctor
as workloads."""

from __future__ import annotations

from typing import Any

from tests.doctor.test_checks import SETTINGS
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, START, Clock, deployment, namespace, reconciler
from tests.shipping.support import installed, of_kind, only
from tls_injector.doctor.read import read
from tls_injector.doctor.workloads import targets
from tls_injector.kube import KubeApi
from tls_injector.names import TRUST_BUNDLE_CONFIGMAP

Obj = dict[str, Any]


def _shipped(emu: Emulator) -> list[Obj]:
    """The injector's namespace and every workload the install and the bootstrap create in it."""
    objects = installed()
    emu.add(only(objects, "Namespace"))
    shipped = [o for kind in ("Deployment", "Job") for o in of_kind(objects, kind)]
    for obj in shipped:
        emu.add(obj)
    return shipped


def test_the_shipped_workloads_are_never_issued_a_certificate_yet_the_bundle_is_mirrored(kubeapi: Emulator) -> None:
    shipped = _shipped(kubeapi)
    assert {o["metadata"]["name"] for o in shipped} >= {"tls-injector-bootstrap"}
    assert reconciler(kubeapi, Clock()).run_pass().converged
    leaves = [s["metadata"]["name"] for s in kubeapi.objects("secrets", OWN_NS)
              if s["metadata"].get("labels", {}).get("tls-injector.io/role") == "leaf"]
    assert leaves == [], "the injector's own workloads got certificates nobody mounts"
    assert kubeapi.get("configmaps", TRUST_BUNDLE_CONFIGMAP, OWN_NS) is not None


def test_in_the_injectors_namespace_only_the_pod_label_true_asks_for_a_certificate(kubeapi: Emulator) -> None:
    """By construction, not by the labels the shipped manifests happen to carry: an unlabelled workload
    there (a user's debugging Deployment, a Job someone copies) is left alone too."""
    namespace(kubeapi, OWN_NS, enabled=True)
    namespace(kubeapi, "shop", enabled=True)
    deployment(kubeapi, "copy-of-bootstrap", OWN_NS, labels={})
    deployment(kubeapi, "asked", OWN_NS, labels={"tls-injector.io/inject": "true"})
    deployment(kubeapi, "web", "shop", labels={})
    assert reconciler(kubeapi, Clock()).run_pass().converged
    assert kubeapi.get("secrets", "copy-of-bootstrap-tls", OWN_NS) is None
    assert kubeapi.get("secrets", "asked-tls", OWN_NS) is not None
    assert kubeapi.get("secrets", "web-tls", "shop") is not None, "other enabled namespaces are unchanged"


def test_doctor_counts_no_shipped_object_as_a_workload(kubeapi: Emulator) -> None:
    _shipped(kubeapi)
    snap = read(KubeApi(kubeapi.api_client()), SETTINGS, now=START)
    assert [t.secret_name for t in targets(snap)] == []
