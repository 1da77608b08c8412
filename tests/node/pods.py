"""What the node tier's tests share to run workloads on the node and read what their containers saw.

The containers are busybox (tests/node/images.py) with node-probe; they print what they find as lines
of their log, which the tests read from the kubelet's pod log folder (`Node.container_log`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.node.harness import Node

CERTS = "/etc/tls-injector/certs"
TRUST = "/etc/tls-injector/trust"
CLIENT = "/etc/tls-injector/client"
NON_ROOT = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
APPEAR_SECONDS = 120.0


def make_namespace(node: Node, namespace: str) -> str:
    node.kubectl("create", "namespace", namespace)
    node.cp.wait_for_service_account(namespace, "default")
    return namespace


def pod_spec(node: Node, script: str, *, pod_security: dict[str, Any],
             host_aliases: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A busybox container `main` running `script` as `sh -c`, non-privileged, read-only root."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1, "securityContext": pod_security,
        "containers": [{"name": "main", "image": node.busybox.name, "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", script],
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}]}
    if host_aliases:
        spec["hostAliases"] = host_aliases
    return spec


def deployment(node: Node, namespace: str, name: str, script: str, *, pod_security: dict[str, Any],
               annotations: dict[str, str] | None = None, host_aliases: list[dict[str, Any]] | None = None,
               ) -> dict[str, Any]:
    """A Deployment of one replica, labelled for injection, its pods labelled `app: <name>`."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"},
                             "annotations": annotations or {}},
                "spec": pod_spec(node, script, pod_security=pod_security, host_aliases=host_aliases)}}}


def service(namespace: str, name: str, *, port: int = 443, target: int = 8443, headless: bool = False
            ) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"app": name}, "ports": [{"port": port, "targetPort": target}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def apply(node: Node, *objects: dict[str, Any]) -> None:
    node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def pods_of(node: Node, namespace: str, app: str) -> list[dict[str, Any]]:
    return list(node.get_json(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")["items"])


def running_pod(node: Node, namespace: str, app: str) -> dict[str, Any]:
    """The first pod labelled `app: <app>`, once it runs and is Ready."""
    deadline = time.monotonic() + APPEAR_SECONDS
    while time.monotonic() < deadline:
        pods = pods_of(node, namespace, app)
        if pods:
            return node.wait_pod(namespace, pods[0]["metadata"]["name"])
        time.sleep(0.5)
    raise AssertionError(f"no pod of {app} in {APPEAR_SECONDS:.0f} s:\n{node.pod_events(namespace, app)}\n"
                         f"{node.diagnosis()}")


def wait_log(node: Node, namespace: str, pod: str, marker: str, *, container: str = "main",
             timeout: float = 60.0, uid: str = "*") -> str:
    """The container's log once it holds `marker`; else a failure with the log and the node's."""
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        log = node.container_log(namespace, pod, container, uid)
        if marker in log:
            return log
        time.sleep(0.5)
    raise AssertionError(f"no {marker!r} in {namespace}/{pod}/{container}'s log after {timeout:.0f} s: {log!r}\n"
                         f"{node.diagnosis()}")


def show_modes(*paths: str) -> str:
    """Shell that prints `mode <octal> <uid> <gid> <path>` for each path, through the kubelet's symlinks."""
    return "".join(f"echo mode $(stat -L -c '%a %u %g' {path}) {path}; " for path in paths)


def modes(log: str) -> dict[str, str]:
    """What `show_modes` printed: file name -> '<octal> <uid> <gid>'."""
    found = {}
    for line in log.splitlines():
        parts = line.split(" ")
        if parts[0] == "mode" and len(parts) == 5:  # a missing file prints no mode, and is left out
            found[parts[4].rsplit("/", 1)[1]] = " ".join(parts[1:4])
    return found
