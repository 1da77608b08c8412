"""The node itself: Ready, pods run as asked, Services answer through kube-proxy, the host untouched."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.node.harness import KUBERNETES_SERVICE_IP, NODE_NAME, Node
from tests.node.host import HostState


def namespace(node: Node, name: str) -> str:
    node.kubectl("create", "namespace", name)
    node.cp.wait_for_service_account(name, "default")
    return name


def busybox_pod(node: Node, name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False, **spec,
                 "containers": [{"name": "main", "image": node.busybox.name, "imagePullPolicy": "Never",
                                 "command": ["/bin/sh", "-c", script]}]},
    }


def apply(node: Node, ns: str, *objects: dict[str, Any]) -> None:
    node.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                 "items": list(objects)}))


def test_node_is_ready_with_its_address(node: Node) -> None:
    found = node.get_json(f"/api/v1/nodes/{NODE_NAME}")
    addresses = {a["type"]: a["address"] for a in found["status"]["addresses"]}
    assert addresses["InternalIP"] == "10.200.0.1"
    ready = [c for c in found["status"]["conditions"] if c["type"] == "Ready"]
    assert [c["status"] for c in ready] == ["True"], found["status"]["conditions"]
    assert found["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert found["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")


def test_a_busybox_pod_runs_as_the_user_it_asks_for(node: Node) -> None:
    ns = namespace(node, "node-busybox")
    pod = busybox_pod(node, "hello", "echo started; id; sleep 3600",
                      securityContext={"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 3000})
    apply(node, ns, pod)
    running = node.wait_pod(ns, "hello")
    assert running["spec"]["nodeName"] == NODE_NAME
    assert running["status"]["podIP"].startswith("10.244.0."), running["status"]
    log = _wait_log(node, ns, "hello", "uid=")
    assert "started" in log, log
    assert "uid=1000 gid=3000" in log, log


def test_a_pod_reaches_another_through_its_service_and_the_apiserver_through_kubernetes(node: Node) -> None:
    ns = namespace(node, "node-service")
    server = busybox_pod(node, "web", "mkdir -p /tmp/www && echo served-by-web > /tmp/www/index.html && "
                                      "exec httpd -f -p 8080 -h /tmp/www")
    server["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    apply(node, ns, server, service)
    node.wait_pod(ns, "web")
    cluster_ip = node.get_json(f"/api/v1/namespaces/{ns}/services/web")["spec"]["clusterIP"]
    assert cluster_ip.startswith("10.96."), cluster_ip
    # The client reads the Service's page, then the apiserver's /version at the `kubernetes` Service,
    # verifying the apiserver's certificate with the cluster CA its service account token comes with.
    client = busybox_pod(node, "client",
                         f"wget -q -O - http://{cluster_ip}/ && "
                         f"node-probe get -ca /var/run/secrets/kubernetes.io/serviceaccount/ca.crt "
                         f"https://{KUBERNETES_SERVICE_IP}/version",
                         restartPolicy="Never", automountServiceAccountToken=True)
    apply(node, ns, client)
    node.wait_pod(ns, "client", phase="Succeeded")
    log = node.container_log(ns, "client", "main")
    assert "served-by-web" in log, log
    assert json.loads(log[log.index("{"):])["gitVersion"] == "v1.37.2", log


def test_the_host_is_unchanged_while_the_node_runs(node: Node, host_before: HostState) -> None:
    changed = host_before.differences(HostState.take())
    assert not changed, "\n".join(changed)
    # The node's own namespace does hold what the host lacks: the proof the comparison sees it.
    inside = node.namespace.run("cat", "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/panic",
                                "/proc/sys/kernel/panic_on_oops", "/proc/sys/net/ipv4/ip_forward").stdout.split()
    assert inside == ["1", "10", "1", "1"], inside
    rules = node.namespace.run("iptables-save").stdout
    assert "KUBE-SERVICES" in rules
    assert "KUBE-SERVICES" not in host_before.rules["iptables-save"]


def _wait_log(node: Node, ns: str, pod: str, marker: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        log = node.container_log(ns, pod, "main")
        if marker in log:
            return log
        time.sleep(0.3)
    raise AssertionError(f"no {marker!r} in the log of {ns}/{pod} after {timeout:.0f} s: {log!r}\n"
                         f"{node.diagnosis()}")
