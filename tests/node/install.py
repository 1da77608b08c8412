"""tls-injector installed on the node as docs/install.md says, running as pods from its own image.

The image is the Dockerfile built by tools/image.py (an OCI archive naming it `tls-injector:<version>`,
the name manifests/base asks for), imported into the node's containerd as a user's node would pull it.
Then `kubectl apply --server-side -k manifests/base` and `-k certs-bootstrap`, unchanged: the bootstrap
Job runs, the reconciler Deployment elects a leader and keeps the webhook's serving Secret and the
configurations' caBundle, the webhook Deployment's pods answer the apiserver at the `tls-injector`
Service (its ClusterIP made real by kube-proxy), registered by Service reference as shipped.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from tests.node.harness import Node

ROOT = Path(__file__).resolve().parents[2]
NS = "tls-injector"
# The image build is cached by tools/image.py; a first build on 2 cores takes minutes (docs/install.md).
IMAGE_BUILD_SECONDS = 3600
INSTALL_SECONDS = 300.0


def product_image() -> Path:
    """tools/image.py's archive (built when missing), or the one $TLS_INJECTOR_NODE_IMAGE_ARCHIVE names."""
    given = os.environ.get("TLS_INJECTOR_NODE_IMAGE_ARCHIVE")
    if given:
        return Path(given)
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "image.py"), "build"], capture_output=True,
                          text=True, timeout=IMAGE_BUILD_SECONDS, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/image.py build exited {done.returncode}:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def image_name(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.loads(member.read())
    return str(index["manifests"][0]["annotations"]["io.containerd.image.name"])


class Installed:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.image = ""

    def install(self) -> Installed:
        archive = product_image()
        self.image = image_name(archive)
        self.node.import_image(archive)
        for folder in ("manifests/base", "certs-bootstrap"):
            self.node.kubectl("apply", "--server-side", "--field-manager=tls-injector-install",
                              "-k", str(ROOT / folder))
        self.wait_job_complete("tls-injector-bootstrap")
        for deployment in ("tls-injector-reconciler", "tls-injector"):
            self.wait_available(deployment)
        self.wait_ca_bundles()
        return self

    def _wait(self, what: str, predicate: Any, timeout: float = INSTALL_SECONDS) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(1)
        pods = self.node.kubectl("get", "pods", "-n", NS, "-o", "wide", check=False).stdout
        events = self.node.kubectl("get", "events", "-n", NS, "--sort-by=.lastTimestamp", check=False).stdout
        logs = "\n".join(f"--- {pod} ---\n{self.node.container_log(NS, pod, container)[-3000:]}"
                         for pod, container in self._pod_containers())
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{pods}\n{events[-4000:]}\n"
                             f"{logs}\n{self.node.diagnosis()}")

    def _pod_containers(self) -> list[tuple[str, str]]:
        found = self.node.get_json(f"/api/v1/namespaces/{NS}/pods")
        return [(pod["metadata"]["name"], container["name"]) for pod in found["items"]
                for container in pod["spec"]["containers"]]

    def wait_job_complete(self, name: str) -> None:
        def complete() -> bool:
            job = self.node.get_json(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")
            return any(c["type"] == "Complete" and c["status"] == "True"
                       for c in job.get("status", {}).get("conditions", []))
        self._wait(f"job {name} to complete", complete)

    def wait_available(self, name: str) -> None:
        """Every replica of the Deployment's current template available, and no other left."""
        def available() -> bool:
            deployment = self.node.get_json(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
            status, wanted = deployment.get("status", {}), deployment["spec"]["replicas"]
            return bool(status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
                        and status.get("availableReplicas", 0) == wanted
                        and status.get("updatedReplicas", 0) == wanted and status.get("replicas", 0) == wanted)
        self._wait(f"deployment {name} available", available)

    def serve_pod_certificates(self) -> None:
        """What docs/install.md tells a cluster serving pod certificates (Kubernetes 1.37) to do: add
        `--pod-certificates=on` to the webhook Deployment's args (its pods have no API access to find out;
        the reconciler finds the API itself and signs), then wait for the rollout and for the old pods to
        be gone: while one drains (--drain-seconds) it still answers the apiserver on the connections the
        apiserver keeps open to it, without the flag."""
        path = f"/apis/apps/v1/namespaces/{NS}/deployments/tls-injector"
        args = self.node.get_json(path)["spec"]["template"]["spec"]["containers"][0]["args"]
        if "--pod-certificates=on" not in args:
            self.node.kubectl("patch", "deployment", "tls-injector", "-n", NS, "--type=json", "-p", json.dumps(
                [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--pod-certificates=on"}]))
        self.wait_available("tls-injector")

        def only_new_pods() -> bool:
            found = self.node.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io%2Fname%3D"
                                       "tls-injector,app.kubernetes.io%2Fcomponent%3Dwebhook")["items"]
            return bool(found) and all("--pod-certificates=on" in pod["spec"]["containers"][0]["args"]
                                       and not pod["metadata"].get("deletionTimestamp") for pod in found)
        self._wait("the webhook's old pods to end", only_new_pods)

        probe = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "pod-certificates-probe", "namespace": "default", "labels": {"tls-injector.io/inject": "true"},
            "annotations": {"tls-injector.io/mode": "pod-certificate"}},
            "spec": {"containers": [{"name": "main", "image": "tls-injector.test/none:1"}]}})

        def answered() -> bool:  # a server-side dry run: the webhook pods now give the projected volume
            done = self.node.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe, check=False)
            volumes = json.loads(done.stdout).get("spec", {}).get("volumes", []) if done.returncode == 0 else []
            return any(v["name"] == "tls-injector-cert" and "projected" in v for v in volumes)
        self._wait("the webhook pods to inject pod certificates", answered, timeout=60)

    def wait_ca_bundles(self) -> None:
        def kept() -> bool:
            hooks = [*self.node.get_json(
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/tls-injector")["webhooks"],
                *self.node.get_json(
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/tls-injector")["webhooks"]]
            return all(base64.b64decode(h["clientConfig"].get("caBundle", "")) for h in hooks)
        self._wait("the webhook configurations' caBundle", kept)
