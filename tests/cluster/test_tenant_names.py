"""A name a tenant writes reaches no request path unvetted, on the real kube-apiserver (docs/security.md,
"Names a tenant writes").

The reconciler runs a pass as its own service account (a TokenRequest token, the shipped RBAC and
policies), as its pod would, with every request it puts on the wire recorded: the path urllib3 sends, after
it folded `..` away (HTTPConnectionPool.urlopen is handed the request target itself). On 635ae4e the
finding's three values were sent as GET /api/v1/secrets, GET .../team-b/secrets/kafka-keystore and
GET .../kube-system/secrets/bootstrap-token-abcdef, and the apiserver answered each (the reconciler's
account may get any Secret). Here none of them is sent; the workloads are told why in a KeystoreRefused
Event, and no keystore is made with another team's password.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import kubernetes.client
import pytest
import urllib3

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import NS, Installation, wait_until
from tests.cluster.test_mission import apply, deployment, make_namespace
from tests.reconcile.cluster import Clock
from tls_injector.kube import KubeApi
from tls_injector.kube.config import ClusterConfig, api_client
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

TEAM_A, TEAM_B = "names-team-a", "names-team-b"
KEYSTORE, PASSWORD = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
HOSTILE = {
    "everything": "../../../secrets",
    "pods": "../../../pods",
    "team-b": f"../../{TEAM_B}/secrets/kafka-keystore",
    "oracle": "../../kube-system/secrets/bootstrap-token-abcdef",
}


@pytest.fixture
def wire() -> Iterator[list[tuple[str, str]]]:
    """Every (method, request target) this process sends, as sent."""
    sent: list[tuple[str, str]] = []
    lock = threading.Lock()
    original = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def urlopen(pool: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        with lock:
            sent.append((method, url))
        return original(pool, method, url, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        urllib3.connectionpool.HTTPConnectionPool.urlopen = original  # type: ignore[method-assign]


def _cluster(cluster: ControlPlane, installed: Installation) -> None:
    make_namespace(cluster, installed.core, TEAM_A)
    make_namespace(cluster, installed.core, TEAM_B)
    installed.core.create_namespaced_secret(TEAM_B, {
        "metadata": {"name": "kafka-keystore"}, "type": "Opaque",
        "data": {"keystore.password": base64.b64encode(b"team-b-password").decode()}})
    installed.core.create_namespaced_secret("kube-system", {
        "metadata": {"name": "bootstrap-token-abcdef"}, "type": "bootstrap.kubernetes.io/token",
        "data": {"token-id": base64.b64encode(b"abcdef").decode(),
                 "token-secret": base64.b64encode(b"0123456789abcdef").decode()}})
    for name, value in HOSTILE.items():
        manifest = deployment(name, TEAM_A, replicas=0)
        manifest["spec"]["template"]["metadata"]["annotations"].update({KEYSTORE: "pkcs12", PASSWORD: value})
        done = apply(cluster, manifest)
        assert done.returncode == 0, done.stderr


def _refusals(core: kubernetes.client.CoreV1Api) -> dict[str, str] | None:
    found = {e.involved_object.name: e.message for e in core.list_namespaced_event(TEAM_A).items
             if e.reason == "KeystoreRefused"}
    return found if set(found) == set(HOSTILE) else None


def test_the_findings_values_send_nothing_and_are_refused_with_why(
        cluster: ControlPlane, installed: Installation, wire: list[tuple[str, str]]) -> None:
    _cluster(cluster, installed)
    kubeconfig = installed.service_account_kubeconfig(NS, "tls-injector-reconciler")
    api = KubeApi(api_client(ClusterConfig(kubeconfig=kubeconfig)))
    reconciler = Reconciler(api, ReconcileSettings(namespace=NS, ca=CaPolicy(settle=timedelta(minutes=5)),
                                                   pod_certificates="off"), clock=Clock(datetime.now(UTC)))
    wire.clear()  # what the test itself sent as admin, to set the cluster up
    report = reconciler.run_pass()

    assert wire, "the recorder saw no request: it records nothing"
    targets = [(method, urlsplit(url)) for method, url in wire]
    assert [t for t in targets if ".." in t[1].path] == []
    assert [t for t in targets if f"/namespaces/{TEAM_B}/" in t[1].path or "/namespaces/kube-system/" in t[1].path] \
        == []
    # No list of every Secret or Pod the pass would not make: its own are label- or field-selected.
    assert [t for t in targets if t[1].path in ("/api/v1/secrets", "/api/v1/pods")
            and "labelSelector" not in t[1].query and "fieldSelector" not in t[1].query
            and "limit=1" not in t[1].query] == [], "an unselected list of every Secret or Pod"
    assert len([m for m in report.keystores_refused if TEAM_A in m]) == len(HOSTILE)

    refusals = wait_until("a KeystoreRefused Event on each workload", lambda: _refusals(installed.core))
    for name, message in refusals.items():
        assert "is no Secret name" in message, (name, message)
    assert "bootstrap.kubernetes.io/token" not in " ".join(refusals.values())
    for name in HOSTILE:
        stored = installed.core.read_namespaced_secret(f"{name}-tls", TEAM_A).data or {}
        assert "keystore.p12" not in stored  # no keystore under anyone's password
