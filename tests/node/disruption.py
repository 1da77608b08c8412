"""What happens to tls-injector's own pods in a cluster's life: a rollout, a process killed, an eviction,
a leader gone; and the waits that tell when the webhook or the reconciler is whole again.

The pods are read through the apiserver; a container is killed with SIGKILL through the node's containerd
(`ctr tasks kill`), as the kernel's OOM killer or a crash would end it: no preStop, no drain, nothing
released.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import wait_until
from tests.node.harness import Node

NS = "tls-injector"
WEBHOOK = "app.kubernetes.io/component=webhook"
RECONCILER = "app.kubernetes.io/component=reconciler"
SETTLE_SECONDS = 180.0
T = TypeVar("T")


def until(what: str, predicate: Callable[[], T | None], *, timeout: float = SETTLE_SECONDS,
          every: float = 0.25, node: Node | None = None) -> T:
    try:
        found: T = wait_until(what, predicate, timeout=timeout, interval=every)
    except AssertionError as timed_out:
        if node is None:
            raise
        raise AssertionError(f"{timed_out}\n{own_logs(node)}\n{node.diagnosis('kubelet', 'kube-proxy')}") from None
    return found


def own_logs(node: Node, lines: int = 15) -> str:
    """The last lines of every run of tls-injector's containers (a restarted one's earlier runs too), from
    the kubelet's pod log folder."""
    root = node.folder / "kubelet" / "pod-logs"
    shown = []
    for path in sorted(root.glob(f"{NS}_*/*/*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        shown.append(f"--- {path.relative_to(root)} ---\n" + "\n".join(tail))
    return "\n".join(shown)


def pods(node: Node, selector: str) -> list[dict[str, Any]]:
    return list(node.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")["items"])


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def serving_endpoints(node: Node) -> set[str]:
    """The pod names the `tls-injector` Service's EndpointSlices list as ready."""
    slices = node.get_json(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
                           "?labelSelector=kubernetes.io%2Fservice-name%3Dtls-injector")["items"]
    return {e["targetRef"]["name"] for s in slices for e in s.get("endpoints") or []
            if e.get("conditions", {}).get("ready") and e.get("targetRef")}


def webhook_whole(node: Node) -> list[dict[str, Any]] | None:
    """Both webhook replicas Ready, none terminating, both in the Service's endpoints; else None."""
    found = pods(node, WEBHOOK)
    if len(found) != 2 or any(p["metadata"].get("deletionTimestamp") or not is_ready(p) for p in found):
        return None
    return found if serving_endpoints(node) == {p["metadata"]["name"] for p in found} else None


def reconciler_whole(node: Node) -> list[dict[str, Any]] | None:
    found = pods(node, RECONCILER)
    if len(found) != 2 or any(p["metadata"].get("deletionTimestamp") or not is_ready(p) for p in found):
        return None
    return found


def pdb_status(node: Node) -> dict[str, Any]:
    return dict(node.get_json(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/tls-injector")["status"])


def kill_container(node: Node, pod: dict[str, Any]) -> str:
    """SIGKILL to the pod's (one) container's process, through containerd; its container id."""
    [status] = pod["status"]["containerStatuses"]
    container = str(status["containerID"]).removeprefix("containerd://")
    done = node.ctr("tasks", "kill", "--signal", "SIGKILL", container)
    if done.returncode != 0:
        raise AssertionError(f"ctr tasks kill {container}: {done.returncode} {done.stdout} {done.stderr}")
    return container


def call(plane: ControlPlane, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """One request as cluster-admin: (HTTP status, body), an error status included."""
    context = ssl.create_default_context(cafile=str(plane.pki.ca.cert))
    context.load_cert_chain(str(plane.pki.admin.cert), str(plane.pki.admin.key))
    request = urllib.request.Request(plane.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


def evict(plane: ControlPlane, name: str) -> tuple[int, str]:
    """The Eviction API as `kubectl drain` calls it: (HTTP status, message)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
    status, data = call(plane, "POST", f"/api/v1/namespaces/{NS}/pods/{name}/eviction", body)
    try:
        message = str(json.loads(data).get("message", ""))
    except ValueError:
        message = data[:300].decode(errors="replace")
    return status, message


def lease(node: Node) -> dict[str, Any]:
    return dict(node.get_json(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/tls-injector-leader")["spec"])


def holder_pod(holder: str) -> str:
    """The reconciler's identity is `<hostname>_<pid>`, and a pod's hostname is its name."""
    return holder.rsplit("_", 1)[0]


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
