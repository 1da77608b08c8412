"""The reconciler's whole lifecycle on the real apiserver, as its own service account under the shipped
RBAC and admission policies (`reserved-objects`, `reconciler-reach`): issue, renew on request, a CA
rotation through every state, a user's own CA. Zero writes refused, and after every pass every leaf
verifies against every bundle as a TLS client would.

Its own control plane (a second one, ~10 s): the reconciler here runs in this process on a clock the
test moves, 6 minutes a pass (the rotation's settle is 5), which the session's running reconciler,
on the wall clock, must not share a CA with.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from cryptography import x509

from tests.cluster.controlplane import ControlPlane
from tests.cluster.controlplane import api_client as cluster_client
from tests.cluster.install import NS, Installation, wait_until
from tests.cluster.test_mission import apply, deployment, make_namespace
from tests.reconcile.cluster import Clock
from tls_injector.kube import KubeApi
from tls_injector.kube.config import ClusterConfig, api_client
from tls_injector.pki import bundle_certificates, load_certificates, make_ca, verify_server
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings

STATES = ("untrusted", "trusted-unused", "trusted-used", "phase-out", "zombie")


class Lifecycle:
    def __init__(self, plane: ControlPlane, install: Installation, admin: kubernetes.client.ApiClient) -> None:
        self.plane = plane
        self.core = kubernetes.client.CoreV1Api(admin)
        self.kubeconfig = install.service_account_kubeconfig(NS, "tls-injector-reconciler")
        self.clock = Clock(datetime.now(UTC))
        self.tenant: kubernetes.client.CoreV1Api | None = None  # set by test_0

    def reconciler(self, **settings: Any) -> Reconciler:
        """A new reconciler each pass, as a new process would be: it resumes from what is stored."""
        api = KubeApi(api_client(ClusterConfig(kubeconfig=self.kubeconfig)))
        return Reconciler(api, ReconcileSettings(namespace=NS, ca=CaPolicy(settle=timedelta(minutes=5)),
                                                 pod_certificates="off", **settings), clock=self.clock)

    def run_pass(self, **settings: Any) -> PassReport:
        report = self.reconciler(**settings).run_pass()
        assert not report.refused, report
        assert not report.failed, report
        assert not report.aborted, report
        assert report.converged, report
        self.assert_every_leaf_trusted_by_every_bundle()
        return report

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes]:
        secret = self.core.read_namespaced_secret(name, namespace)
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def ca_states(self) -> dict[str, str]:
        stored = self.secret_data(NS, "tls-injector-ca")
        return {k.split(".")[0][:8]: k.split(".")[1] for k in stored if k.split(".")[1] in STATES}

    def leaves(self) -> list[Any]:
        return self.core.list_secret_for_all_namespaces(label_selector="tls-injector.io/role=leaf").items

    def assert_every_leaf_trusted_by_every_bundle(self) -> int:
        bundles = [bundle_certificates(cm.data or {}) for cm in self.core.list_config_map_for_all_namespaces(
            field_selector="metadata.name=tls-injector-trust-bundle").items]
        assert bundles, "no trust bundle anywhere"
        for secret in self.leaves():
            chain = load_certificates(base64.b64decode(secret.data["tls.crt"]))
            name = f"{secret.metadata.name.removesuffix('-tls')}.{secret.metadata.namespace}.svc"
            for trusted in bundles:
                verify_server(chain[0], chain[1:], trusted=trusted, dns_name=name, now=self.clock.now)
        return len(self.leaves())


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    plane = ControlPlane(tmp_path_factory.mktemp("lifecycle-plane")).start()
    try:
        admin = cluster_client(plane.admin_kubeconfig)
        install = Installation(plane, admin, Path(tmp_path_factory.mktemp("lifecycle-install")))
        install.apply_manifests()
        for n in range(2):
            make_namespace(plane, install.core, f"life{n}")
            for w in range(2):
                assert apply(plane, deployment(f"app{w}", f"life{n}", replicas=0)).returncode == 0
        yield Lifecycle(plane, install, admin)
    finally:
        plane.stop()


def serial(lifecycle: Lifecycle, namespace: str, name: str) -> int:
    return x509.load_pem_x509_certificate(lifecycle.secret_data(namespace, name)["tls.crt"]).serial_number


def refusal(call: Any) -> str:
    try:
        call()
    except kubernetes.client.ApiException as e:
        return f"{e.status} {e.body}"
    return "allowed"


def test_0_the_shipped_policies_are_in_force_for_the_reconciler_and_for_a_tenant(lifecycle: Lifecycle) -> None:
    """Before the lifecycle: the reach policy refuses the reconciler's account a write outside what it owns,
    and reserved-objects refuses a tenant, who may write Secrets and ConfigMaps in its own namespace, the
    bundle's name and our label. (A policy binding takes a moment to be enforced after it is created.)"""
    reconciler = kubernetes.client.CoreV1Api(api_client(ClusterConfig(kubeconfig=lifecycle.kubeconfig)))
    unlabelled = {"metadata": {"generateName": "not-ours-"}, "type": "Opaque", "data": {}}
    answers: list[str] = []

    def refused() -> bool:
        answers.append(refusal(lambda: reconciler.create_namespaced_secret("life0", unlabelled)))
        return answers[-1].startswith("403")

    wait_until("the reach policy", refused, timeout=60)
    answer = answers[-1]
    assert "tls-injector.reconciler-reach" in answer

    # A stolen reconciler token cannot mint a credential: a Secret the token controller would fill with
    # a service account's token, or a node-join token, is refused even labelled as ours (reach: types).
    ours_labels = {"app.kubernetes.io/managed-by": "tls-injector"}
    for kind, extra in (("kubernetes.io/service-account-token", {"annotations": {
            "kubernetes.io/service-account.name": "tls-injector-reconciler"}}), ("bootstrap.kubernetes.io/token", {})):
        minted = refusal(lambda k=kind, e=extra: reconciler.create_namespaced_secret(NS, {
            "metadata": {"generateName": "minted-", "labels": ours_labels, **e}, "type": k, "data": {}}))
        assert minted.startswith("403"), (kind, minted)
        assert "tls-injector.reconciler-reach" in minted, (kind, minted)

    make_namespace(lifecycle.plane, lifecycle.core, "tenant")
    rbac = kubernetes.client.RbacAuthorizationV1Api(lifecycle.core.api_client)
    rbac.create_namespaced_role("tenant", {"metadata": {"name": "writer"}, "rules": [{
        "apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["*"]}]})
    rbac.create_namespaced_role_binding("tenant", {"metadata": {"name": "writer"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"}, "subjects": [{
            "kind": "ServiceAccount", "name": "default", "namespace": "tenant"}]})
    token = lifecycle.core.create_namespaced_service_account_token(
        "default", "tenant", {"spec": {"expirationSeconds": 600}}).status.token
    tenant = kubernetes.client.CoreV1Api(cluster_client(lifecycle.plane.token_kubeconfig("tenant", token)))
    lifecycle.tenant = tenant
    ours = {"app.kubernetes.io/managed-by": "tls-injector"}
    squats = {
        "the bundle's name": lambda: tenant.create_namespaced_config_map("tenant", {
            "metadata": {"name": "tls-injector-trust-bundle"}, "data": {"ca-bundle.crt": "planted"}}),
        "our label on a Secret": lambda: tenant.create_namespaced_secret("tenant", {
            "metadata": {"name": "web-tls", "labels": ours}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": "", "tls.key": ""}}),
        "our label on a ConfigMap": lambda: tenant.create_namespaced_config_map("tenant", {
            "metadata": {"name": "x", "labels": ours}}),
    }
    for what, call in squats.items():
        answer = refusal(call)
        assert answer.startswith("403"), (what, answer)
        assert "tls-injector.reserved-objects" in answer, (what, answer)
    assert refusal(lambda: tenant.create_namespaced_config_map("tenant", {"metadata": {"name": "mine"}})) == "allowed"


def test_1_the_first_pass_issues_every_workload_under_the_shipped_rbac_and_policies(lifecycle: Lifecycle) -> None:
    report = lifecycle.run_pass()
    assert report.writes["create"] >= 4 + 2 + 1  # four leaves, two bundles, the CA set
    assert lifecycle.assert_every_leaf_trusted_by_every_bundle() == 4
    assert lifecycle.run_pass().write_count == 0  # converged costs nothing


def test_2_a_renewal_asked_for_by_the_workloads_owner_is_done_and_settles(lifecycle: Lifecycle) -> None:
    before = serial(lifecycle, "life0", "app0-tls")
    lifecycle.core.patch_namespaced_secret("app0-tls", "life0", {"metadata": {"annotations": {
        "tls-injector.io/force-renew": "1"}}})  # the owner's one allowed write to our Secret (reserved-objects)
    report = lifecycle.run_pass()
    assert report.write_count >= 1
    assert serial(lifecycle, "life0", "app0-tls") != before
    assert lifecycle.run_pass().write_count == 0


def test_3_a_forced_ca_replacement_walks_every_state_without_a_refused_write_or_an_untrusted_leaf(
    lifecycle: Lifecycle,
) -> None:
    (old,) = lifecycle.ca_states()
    lifecycle.core.patch_namespaced_secret("tls-injector-ca", NS, {"metadata": {"annotations": {
        "tls-injector.io/force-replace": "1"}}})
    history = [lifecycle.ca_states()]
    for _ in range(20):
        lifecycle.clock.advance(timedelta(minutes=6))
        report = lifecycle.run_pass()
        if history[-1] != lifecycle.ca_states():
            history.append(lifecycle.ca_states())
        if report.write_count == 0 and old not in lifecycle.ca_states():
            break
    (new,) = lifecycle.ca_states()
    assert [h.get(old, "removed") for h in history] == [
        "trusted-used", "trusted-used", "trusted-used", "phase-out", "zombie", "removed"]
    assert [h.get(new, "-") for h in history] == [
        "-", "untrusted", "trusted-unused", "trusted-used", "trusted-used", "trusted-used"]


def test_4_a_users_own_ca_takes_over_without_a_refused_write(lifecycle: Lifecycle) -> None:
    user = make_ca(common_name="user-ca", now=lifecycle.clock.now)
    key = user.key_pem
    lifecycle.core.create_namespaced_secret(NS, {
        "metadata": {"name": "my-ca"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": base64.b64encode(user.cert_pem).decode(), "tls.key": base64.b64encode(key).decode()}})
    for _ in range(20):
        lifecycle.clock.advance(timedelta(minutes=6))
        report = lifecycle.run_pass(user_ca_secret="my-ca")
        leaf = load_certificates(lifecycle.secret_data("life1", "app1-tls")["tls.crt"])
        if report.write_count == 0 and leaf[0].issuer == user.cert.subject:
            break
    assert all(load_certificates(base64.b64decode(s.data["tls.crt"]))[0].issuer == user.cert.subject
               for s in lifecycle.leaves())
    stored = lifecycle.secret_data(NS, "tls-injector-ca")
    assert not any(value == key for value in stored.values())  # the user's key stays in the user's Secret


def test_5_a_tenant_cannot_unlabel_edit_or_relabel_the_certificate_issued_into_its_namespace(
    lifecycle: Lifecycle,
) -> None:
    """Label tricks on a Secret that is ours, in the tenant's own namespace, where RBAC lets it write
    Secrets: stripping our label (to make it look like the tenant's own, then change it), changing its
    data, and adding our label to a Secret of its own. Each is refused by reserved-objects."""
    tenant = lifecycle.tenant
    assert tenant is not None, "test_0 sets up the tenant"
    assert apply(lifecycle.plane, deployment("shop", "tenant", replicas=0)).returncode == 0
    lifecycle.run_pass(user_ca_secret="my-ca")  # the CA test_4 handed over to
    tricks = {
        "strip our label": lambda: tenant.patch_namespaced_secret("shop-tls", "tenant", {"metadata": {"labels": {
            "app.kubernetes.io/managed-by": None}}}),
        "change its key": lambda: tenant.patch_namespaced_secret("shop-tls", "tenant", {"data": {
            "tls.key": base64.b64encode(b"planted").decode()}}),
        "relabel its own": lambda: tenant.patch_namespaced_config_map("mine", "tenant", {"metadata": {"labels": {
            "app.kubernetes.io/managed-by": "tls-injector"}}}),
    }
    for what, call in tricks.items():
        answer = refusal(call)
        assert answer.startswith("403"), (what, answer)
        assert "tls-injector.reserved-objects" in answer, (what, answer)
    assert lifecycle.run_pass(user_ca_secret="my-ca").write_count == 0  # nothing changed, nothing to repair
