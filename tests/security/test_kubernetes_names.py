"""No workload gets a name Kubernetes itself serves in-cluster (docs/security.md, "Names Kubernetes serves").

A Deployment called `kubernetes` in `default`, or `service-names: kubernetes` there, was issued
`kubernetes.default.svc`: the API server's name, which a client whose only trust is our bundle would then
believe from that workload. Refused, with its reason, on every path a certificate is decided on: the
workload's own name, `service-names`, a Service selecting the pods, a StatefulSet's governing Service and
the pod-certificate signer; and the cluster DNS, `kube-dns` in `kube-system`. A team's own Service called
`kubernetes` in its own namespace is its own name, and is issued.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector.pki import MAX_SERVICES, dns_sans, load_certificates, served_by_kubernetes, vet_service_names

SERVICE_NAMES = "tls-injector.io/service-names"
API_SERVER = ["kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]


@pytest.mark.parametrize(("service", "ns", "refused"), [
    ("kubernetes", "default", True),
    ("kubernetes", "team-a", False),  # team-a's own Service of that name
    ("kubernetes", "defaults", False),
    ("web", "default", False),
    ("Kubernetes", "default", False),  # no Service name at all: refused as such, not as this
    ("kube-dns", "kube-system", True),
    ("metrics-server", "kube-system", False),  # the operator's add-on, in a namespace no tenant writes
    ("kube-dns", "kube-public", False),
    ("kube-dns", "team-a", False),
    ("web", "kubeflow", False),
])
def test_the_names_kubernetes_serves_are_refused_and_only_those(service: str, ns: str, refused: bool) -> None:
    assert bool(served_by_kubernetes(service, ns)) is refused
    checked = vet_service_names([service, "api"], namespace=ns)
    assert [name for name, _ in checked.refused] == ([service] if refused or service == "Kubernetes" else [])


def test_the_limit_counts_only_names_kept() -> None:
    asked = ["kubernetes", *(f"s{i}" for i in range(MAX_SERVICES))]
    checked = vet_service_names(asked, namespace="default")
    assert len(checked.kept) == MAX_SERVICES
    assert [name for name, _ in checked.refused] == ["kubernetes"]


def _sans(emu: Emulator, secret: str, ns: str) -> list[str]:
    return sorted(dns_sans(load_certificates(data(emu.get("secrets", secret, ns))["tls.crt"])[0]))


def _refusals(emu: Emulator, ns: str) -> list[tuple[str, str]]:
    return [(e["involvedObject"]["name"], e["message"]) for e in emu.objects("events", ns)
            if e["reason"] == "ServiceNamesRefused"]


def _service(emu: Emulator, name: str, ns: str, selector: dict[str, str]) -> None:
    emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
             "spec": {"selector": selector, "ports": [{"port": 443}]}})


def test_a_deployment_called_kubernetes_in_default_is_not_issued_the_api_servers_name(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    deployment(kubeapi, "kubernetes", "default")
    report = reconciler(kubeapi, Clock()).run_pass()
    assert _sans(kubeapi, "kubernetes-tls", "default") == []  # issued naming nothing: its pods start
    [message] = report.names_refused
    assert "'kubernetes' (the API server's own name in namespace default" in message
    [(who, said)] = _refusals(kubeapi, "default")
    assert who == "kubernetes"
    assert "API server" in said


def test_service_names_kubernetes_in_default_is_refused_and_the_rest_issued(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    deployment(kubeapi, "web", "default", annotations={SERVICE_NAMES: "kubernetes, web"})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert _sans(kubeapi, "web-tls", "default") == ["web.default.svc", "web.default.svc.cluster.local"]
    assert not set(API_SERVER) & set(_sans(kubeapi, "web-tls", "default"))
    assert any("'kubernetes'" in m for m in report.names_refused)
    assert [who for who, _ in _refusals(kubeapi, "default")] == ["web"]


def test_the_kubernetes_service_selecting_a_tenants_pods_is_not_named(kubeapi: Emulator) -> None:
    """A tenant who may edit Services in `default` gives the API server's Service a selector of its pods."""
    namespace(kubeapi, OWN_NS)
    deployment(kubeapi, "web", "default")
    _service(kubeapi, "kubernetes", "default", {"app": "web"})
    reconciler(kubeapi, Clock()).run_pass()
    assert _sans(kubeapi, "web-tls", "default") == ["web.default.svc", "web.default.svc.cluster.local"]


def test_a_statefulset_governed_by_kubernetes_in_default_gets_no_wildcard_under_it(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    sts = deployment(kubeapi, "db", "default", kind="StatefulSet")
    kubeapi.store.update(kubeapi.resource("statefulsets"), "default", "db",
                         {**sts, "spec": {**sts["spec"], "serviceName": "kubernetes"}})
    _service(kubeapi, "kubernetes", "default", {"app": "db"})
    reconciler(kubeapi, Clock()).run_pass()
    assert not [n for n in _sans(kubeapi, "db-tls", "default") if "kubernetes" in n]


def test_a_workload_in_kube_system_is_not_issued_the_cluster_dns_name(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    deployment(kubeapi, "coredns", "kube-system", annotations={SERVICE_NAMES: "kube-dns, metrics"})
    _service(kubeapi, "kube-dns", "kube-system", {"app": "coredns"})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert _sans(kubeapi, "coredns-tls", "kube-system") == ["metrics.kube-system.svc",
                                                           "metrics.kube-system.svc.cluster.local"]
    assert any("'kube-dns' (the cluster DNS's own name" in m for m in report.names_refused)


def test_a_teams_own_service_called_kubernetes_is_its_own_name(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "team-a")
    deployment(kubeapi, "kubernetes", "team-a")
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.converged
    assert _sans(kubeapi, "kubernetes-tls", "team-a") == ["kubernetes.team-a.svc",
                                                         "kubernetes.team-a.svc.cluster.local"]


@pytest.fixture
def native() -> Iterator[Emulator]:
    with running_emulator(seed=0, certificates=("v1",), now=Clock()) as emu:
        namespace(emu, OWN_NS)
        yield emu


@pytest.mark.parametrize(("workload", "notes"), [("kubernetes", None), ("web", {SERVICE_NAMES: "kubernetes"})])
def test_the_pod_certificate_signer_denies_the_api_servers_name(native: Emulator, workload: str,
                                                                notes: dict[str, Any] | None) -> None:
    req = kubelet.request(native, kubelet.pod(native, workload, "default", annotations=notes))
    reconciler(native, Clock()).run_pass()
    condition = kubelet.condition(native, req)
    assert (condition["type"], condition["reason"]) == ("Denied", "InvalidNames")
    assert "API server" in condition["message"]
