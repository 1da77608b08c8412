"""Workloads of the node tests: a labelled Deployment of the busybox image (with node-probe), applied, its
pod waited for, its log read. Shared by tests/node/test_mission.py and tests/node/test_rotation.py.
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


def deployment(node: Node, namespace: str, name: str, script: str, *, pod_security: dict[str, Any],
               annotations: dict[str, str] | None = None, host_aliases: list[dict[str, Any]] | None = None,
               ) -> dict[str, Any]:
    """One replica of `script` (sh -c) as a non-privileged container, opted into the injection."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1, "securityContext": pod_security,
        "containers": [{"name": "main", "image": node.busybox.name, "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", script],
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}]}
    if host_aliases:
        spec["hostAliases"] = host_aliases
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"},
                             "annotations": annotations or {}},
                "spec": spec}}}


def apply(node: Node, *objects: dict[str, Any]) -> None:
    node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def running_pod(node: Node, namespace: str, app: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = node.get_json(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")["items"]
        if pods:
            return node.wait_pod(namespace, pods[0]["metadata"]["name"])
        time.sleep(0.5)
    raise AssertionError(f"no pod of {app} in {timeout:.0f} s:\n{node.pod_events(namespace, app)}\n"
                         f"{node.diagnosis()}")


def wait_log(node: Node, namespace: str, pod: str, marker: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        log = node.container_log(namespace, pod, "main")
        if marker in log:
            return log
        time.sleep(0.5)
    raise AssertionError(f"no {marker!r} in {namespace}/{pod}'s log after {timeout:.0f} s: {log[-4000:]!r}\n"
                         f"{node.diagnosis()}")
