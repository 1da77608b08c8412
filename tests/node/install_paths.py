"""tls-injector installed on a node of its own by each way docs/install.md gives a user, and what a user
then checks: the helpers of tests/node/test_install_paths.py.

Each install path gets a fresh node (tests/node/harness.py), since the injector's cluster-scoped objects
(the webhook configurations, the PriorityClass, the admission policies) have fixed names: one install
per cluster, as docs/install.md says. The documented command blocks run as written, under bash -euo
pipefail, from the test process (outside the node, as a user's machine): kubectl of the cluster's
release, helm, the release tools and the `tls-injector` command of the suite's environment on PATH, and
KUBECONFIG naming the node's admin kubeconfig (its server is the relay to the apiserver inside the node).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.node.harness import NODE_NAME, Node
from tests.node.install import NS
from tests.shipping.helm import helm
from tests.shipping.install_doc import Block, blocks

ROOT = Path(__file__).resolve().parents[2]
INSTALL_DOC = ROOT / "docs" / "install.md"
# The Apply block waits on the Job (120 s, its own flag) and two rollouts; helm --wait on the same. On 2
# busy cores an install has taken about a minute: this bounds a stuck one.
BLOCK_SECONDS = 600.0
# How long a port-forward may take to listen, and a probe result to show in the kubelet's metrics.
FORWARD_SECONDS = 30.0
LEASE_SECONDS = 15  # the reconciler's Lease duration (app/kube/lease.py, docs/install.md's doctor table)


def documented(where: str, starting: str) -> Block:
    """The one block of docs/install.md marked `where` whose text starts with `starting`."""
    (found,) = [b for b in blocks(INSTALL_DOC) if b.where == where and b.text.startswith(starting)]
    return found


@dataclass
class Installation:
    """One install path on its node: where its commands ran and what they were given."""

    path: str
    node: Node
    tree: Path  # the copy of the repository the documented commands ran in
    env: dict[str, str] = field(default_factory=dict)  # REGISTRY, DIGEST, client settings
    tools: tuple[Path, ...] = ()
    rendered: list[dict[str, Any]] = field(default_factory=list)  # the objects the install asked for
    registry_log: Path | None = None  # the registry's, when the install pulled from one

    def sh(self, script: str, *, timeout: float = BLOCK_SECONDS, **more: str) -> subprocess.CompletedProcess[str]:
        """`script` as a user's shell runs it, against this node's cluster."""
        # The cluster's own kubectl first; then the suite's environment (the `tls-injector` command).
        path = os.pathsep.join([*map(str, self.tools), str(self.node.cp.bin), str(Path(sys.executable).parent),
                                str(Path(helm()).parent), os.environ.get("PATH", "")])
        env = {**os.environ, **self.env, **more, "PATH": path, "KUBECONFIG": str(self.node.cp.admin_kubeconfig)}
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=self.tree, env=env,
                              capture_output=True, text=True, check=False, timeout=timeout)

    def run_block(self, block: Block, text: str = "", **more: str) -> subprocess.CompletedProcess[str]:
        """A documented block (or `text`, the block with a stated change); fails naming the doc's line."""
        done = self.sh(text or block.text, **more)
        assert done.returncode == block.exit, (
            f"docs/install.md:{block.line}: exit {done.returncode}, not {block.exit}\n{text or block.text}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{self.state()}")
        return done

    def state(self) -> str:
        """What a failure message needs: the injector's pods and events, the node's log tails."""
        pods = self.node.kubectl("get", "pods", "-n", NS, "-o", "wide", check=False)
        events = self.node.kubectl("get", "events", "-n", NS, "--sort-by=.lastTimestamp", check=False)
        return f"{pods.stdout}{pods.stderr}\n{events.stdout[-4000:]}\n{self.node.diagnosis()}"

    # ---- what the cluster holds --------------------------------------------------------------------

    def pods(self, component: str) -> list[dict[str, Any]]:
        found = self.node.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3D"
                                   f"{component}")
        return list(found["items"])

    def deployment(self, name: str) -> dict[str, Any]:
        return self.node.get_json(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")

    def declared(self, kind: str, name: str) -> dict[str, Any]:
        """The object of that kind and name among what the install asked for."""
        (found,) = [o for o in self.rendered if o.get("kind") == kind and o["metadata"]["name"] == name]
        return found


def manifests(text: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML stream (kustomize's or helm's output)."""
    import yaml

    return [doc for doc in yaml.safe_load_all(text) if doc]


# ---- the checks a user makes ---------------------------------------------------------------------------

def job(installation: Installation, name: str) -> dict[str, Any]:
    return installation.node.get_json(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")


def service_endpoints(installation: Installation, service: str) -> dict[str, bool]:
    """Pod IP -> ready, from the Service's EndpointSlices (what kube-proxy routes to)."""
    slices = installation.node.get_json(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices?"
                                        f"labelSelector=kubernetes.io%2Fservice-name%3D{service}")["items"]
    return {address: bool(endpoint.get("conditions", {}).get("ready"))
            for piece in slices for endpoint in piece.get("endpoints") or [] for address in endpoint["addresses"]}


def lease(installation: Installation, name: str = "tls-injector-leader") -> dict[str, Any]:
    return installation.node.get_json(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}")


_PROBE_LINE = re.compile(r'^prober_probe_total\{(?P<labels>[^}]*)\} (?P<count>\S+)$')


def probe_results(installation: Installation) -> dict[tuple[str, str, str], dict[str, float]]:
    """(pod, container, probe type) -> {result: count}, as the kubelet counts the probes it ran
    (its /metrics/probes, read through the apiserver's node proxy)."""
    raw = installation.node.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/metrics/probes").stdout
    counts: dict[tuple[str, str, str], dict[str, float]] = {}
    for line in raw.splitlines():
        found = _PROBE_LINE.match(line)
        if not found:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
        if labels.get("namespace") != NS:
            continue
        key = (labels["pod"], labels["container"], labels["probe_type"])
        counts.setdefault(key, {})[labels["result"]] = float(found["count"])
    return counts


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def port_forward(installation: Installation, target: str, remote: int) -> Iterator[int]:
    """`kubectl -n tls-injector port-forward TARGET PORT:REMOTE` on a free local port, once it listens."""
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(installation.node.cp.admin_kubeconfig)}
    process = subprocess.Popen([str(installation.node.cp.bin / "kubectl"), "-n", NS, "port-forward", target,
                                f"{port}:{remote}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + FORWARD_SECONDS
        while True:
            if process.poll() is not None:
                said = process.stdout.read() if process.stdout else ""
                raise AssertionError(f"kubectl port-forward exited {process.returncode}: {said}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, f"kubectl port-forward did not listen in {FORWARD_SECONDS} s"
            time.sleep(0.2)
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
