"""The mission on running pods: tls-injector installed from its image as docs/install.md says, a
labelled Deployment's pods start with the certificate and bundle mounted and readable by a non-root
container, and a client pod verifies a server pod through its Service's DNS name with that bundle.

There is no DNS server on the node: the client pod names the Service by hostAliases (the kubelet writes
them into the pod's /etc/hosts), `web.node-mission.svc` -> the Service's ClusterIP. The name the client
verifies the certificate against is the Service's DNS name all the same; only its resolution differs.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.node.harness import Node
from tests.node.install import IMAGE_BUILD_SECONDS, Installed

# The first test here pays for the image build (cached by tools/image.py) and the install.
pytestmark = pytest.mark.timeout(IMAGE_BUILD_SECONDS + 600)
NS = "node-mission"
CERTS = "/etc/tls-injector/certs"
TRUST = "/etc/tls-injector/trust"
# The modes seen inside the container, `stat -L -c '%a %u %g'` (docs/node-tests.md records them): a
# Secret or ConfigMap volume's defaultMode 0644, owned by root; with fsGroup the kubelet gives the files
# that group (and keeps them group-readable). Non-root reads them either way, the key included.
MODES_WITHOUT_FS_GROUP = {"tls.crt": "644 0 0", "tls.key": "644 0 0", "ca-bundle.crt": "644 0 0"}
MODES_WITH_FS_GROUP = {"tls.crt": "644 0 2000", "tls.key": "644 0 2000", "ca-bundle.crt": "644 0 2000"}


@pytest.fixture(scope="session")
def installed(node: Node) -> Installed:
    return Installed(node).install()


@pytest.fixture(scope="session")
def mission_namespace(node: Node, installed: Installed) -> str:
    node.kubectl("create", "namespace", NS)
    node.cp.wait_for_service_account(NS, "default")
    return NS


def deployment(node: Node, name: str, script: str, *, pod_security: dict[str, Any],
               annotations: dict[str, str] | None = None, host_aliases: list[dict[str, Any]] | None = None,
               restart: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1, "securityContext": pod_security,
        "containers": [{"name": "main", "image": node.busybox.name, "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", script],
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}]}
    if host_aliases:
        spec["hostAliases"] = host_aliases
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"},
                             "annotations": annotations or {}},
                "spec": spec}}}


def apply(node: Node, *objects: dict[str, Any]) -> None:
    node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def running_pod(node: Node, app: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = node.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}")["items"]
        if pods:
            return node.wait_pod(NS, pods[0]["metadata"]["name"])
        time.sleep(0.5)
    raise AssertionError(f"no pod of {app} in 120 s:\n{node.pod_events(NS, app)}\n{node.diagnosis()}")


def wait_log(node: Node, pod: str, marker: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        log = node.container_log(NS, pod, "main")
        if marker in log:
            return log
        time.sleep(0.5)
    raise AssertionError(f"no {marker!r} in {NS}/{pod}'s log after {timeout:.0f} s: {log!r}\n{node.diagnosis()}")


def modes(log: str) -> dict[str, str]:
    found = {}
    for line in log.splitlines():
        if line.startswith("mode "):
            _, value_a, value_b, value_c, path = line.split(" ", 4)
            found[path.rsplit("/", 1)[1]] = f"{value_a} {value_b} {value_c}"
    return found


SHOW = (f"for f in {CERTS}/tls.crt {CERTS}/tls.key {TRUST}/ca-bundle.crt; do "
        "echo mode $(stat -L -c '%a %u %g' $f) $f; done; "
        f"id; cat {CERTS}/tls.key > /dev/null && echo key-readable; cat {TRUST}/ca-bundle.crt > /dev/null && "
        "echo bundle-readable; echo done; sleep 3600")


@pytest.mark.parametrize(("name", "pod_security", "expected"), [
    ("plain", {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}, MODES_WITHOUT_FS_GROUP),
    ("fsgroup", {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
     MODES_WITH_FS_GROUP),
])
def test_a_labelled_deployments_pod_reads_its_certificate_and_bundle_as_non_root(
        node: Node, mission_namespace: str, name: str, pod_security: dict[str, Any],
        expected: dict[str, str]) -> None:
    apply(node, deployment(node, name, SHOW, pod_security=pod_security))
    pod = running_pod(node, name)
    assert "tls-injector.io/injected" in pod["metadata"]["annotations"], pod["metadata"]
    log = wait_log(node, pod["metadata"]["name"], "done")
    assert "uid=1000" in log, log
    assert "key-readable" in log, log
    assert "bundle-readable" in log, log
    assert modes(log) == expected, log


def test_a_client_pod_verifies_a_server_pod_by_its_service_name_and_refuses_a_wrong_ca(
        node: Node, mission_namespace: str) -> None:
    non_root = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    server = deployment(node, "web", f"exec node-probe serve -addr :8443 -cert {CERTS}/tls.crt "
                                     f"-key {CERTS}/tls.key", pod_security=non_root)
    server["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 8443}, "periodSeconds": 1}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 443, "targetPort": 8443}]}}
    apply(node, server, service)
    running_pod(node, "web")
    cluster_ip = node.get_json(f"/api/v1/namespaces/{NS}/services/web")["spec"]["clusterIP"]
    names = [f"web.{NS}.svc", f"web.{NS}.svc.cluster.local"]
    # The right bundle, then a wrong CA: the cluster's own CA (the service account's ca.crt) signed
    # the apiserver, not this server; the client must refuse it.
    script = (f"node-probe get -ca {TRUST}/ca-bundle.crt https://web.{NS}.svc/ && echo right-ca-ok; "
              f"node-probe get -ca /var/run/secrets/kubernetes.io/serviceaccount/ca.crt https://web.{NS}.svc/ "
              "&& echo wrong-ca-accepted || echo wrong-ca-refused; echo done; sleep 3600")
    client = deployment(node, "client", script, pod_security=non_root,
                        annotations={"tls-injector.io/mode": "trust-only"},
                        host_aliases=[{"ip": cluster_ip, "hostnames": names}])
    client["spec"]["template"]["spec"]["automountServiceAccountToken"] = True
    apply(node, client)
    pod = running_pod(node, "client")
    log = wait_log(node, pod["metadata"]["name"], "done")
    assert "ok client=-" in log, log
    assert "right-ca-ok" in log, log
    assert "wrong-ca-refused" in log, log
    assert "certificate signed by unknown authority" in log, log
