"""`helm install`, `helm upgrade` and `helm uninstall` of charts/tls-injector on a real kube-apiserver.

On a control plane of its own (one per module, ~10 s): the chart makes the same cluster-scoped objects
(webhook configurations, admission policies, ClusterRoles) as manifests/base, which the session's
`installed` fixture applies on the shared control plane, and both on one cluster would overwrite each
other.

The chart's bootstrap Job is a post-install and post-upgrade hook, and helm waits for it to complete.
No kubelet runs here, so this test does the kubelet's part for that Job's pod: it runs the pod's own
command (`tls-injector <args of the pod>`) on this machine with a token of the pod's service account
(`tls-injector-bootstrap`, under the chart's RBAC), then reports the pod's end in its status, exit code
included, as the kubelet would; the real Job controller turns that into the Job's completion, which
helm waits for. Nothing in the chart is skipped (no `--no-hooks`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from tests.cluster.controlplane import ControlPlane, api_client
from tests.cluster.install import ROOT
from tests.shipping.helm import CHART, helm

NS = "tls-injector"
RELEASE = "tls-injector"
# helm's own deadline for the hook (and each step); the hook's pod is answered within seconds here.
HELM_TIMEOUT_SECONDS = 240


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    own = ControlPlane(tmp_path_factory.mktemp("helm-control-plane"))
    try:
        own.start()
        yield own
    finally:
        own.stop()


@pytest.fixture(scope="module")
def core(plane: ControlPlane) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client(plane.admin_kubeconfig))


class HookKubelet:
    """The kubelet's part for the hook Job's pods: run each new one's command, then report its end."""

    def __init__(self, plane: ControlPlane, core: kubernetes.client.CoreV1Api) -> None:
        self.plane, self.core = plane, core
        self.done: dict[str, int] = {}  # pod name -> exit code
        self.logs: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> HookKubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                pods = self.core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=certs-bootstrap")
            except kubernetes.client.ApiException:
                continue  # the namespace may not exist yet
            items: list[Any] = list(pods.items)  # the client's models: every field Optional
            for pod in items:
                if pod.metadata.name not in self.done and pod.status.phase == "Pending":
                    self._run(pod)

    def _token_kubeconfig(self, account: str) -> Path:
        self.plane.wait_for_service_account(NS, account)
        request: Any = {"spec": {"expirationSeconds": 600}}  # the typed call takes a dict as well as a model
        answer: Any = self.core.create_namespaced_service_account_token(account, NS, request)
        token = str(answer.status.token)
        return self.plane.token_kubeconfig(f"helm-{account}", token)

    def _run(self, pod: Any) -> None:
        container = pod.spec.containers[0]
        kubeconfig = self._token_kubeconfig(pod.spec.service_account_name)
        started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ran = subprocess.run([sys.executable, "-m", "tls_injector", *container.args, f"--kubeconfig={kubeconfig}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
        self.done[pod.metadata.name], self.logs[pod.metadata.name] = ran.returncode, ran.stderr[-3000:]
        finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        terminated = {"exitCode": ran.returncode, "reason": "Completed" if ran.returncode == 0 else "Error",
                      "startedAt": started, "finishedAt": finished}
        status = {"phase": "Succeeded" if ran.returncode == 0 else "Failed", "startTime": started,
                  "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "",
                                         "ready": False, "restartCount": 0, "started": False,
                                         "state": {"terminated": terminated}}]}
        self.core.patch_namespaced_pod_status(pod.metadata.name, NS, {"status": status})


def run_helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env.update(HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config", HELM_DATA_HOME=f"{home}/data")
        return subprocess.run([helm(), f"--kubeconfig={plane.admin_kubeconfig}", *args], capture_output=True,
                              text=True, check=False, timeout=HELM_TIMEOUT_SECONDS + 60, env=env)


def manifest(plane: ControlPlane) -> str:
    got = run_helm(plane, "get", "manifest", RELEASE, "-n", NS)
    assert got.returncode == 0, got.stderr
    return got.stdout


def rendered_names(text: str) -> set[str]:
    """`kind/name` of every object in a manifest, lower-cased as `kubectl get -o name` prints them."""
    return {f"{o['kind']}/{o['metadata']['name']}".lower() for o in yaml.safe_load_all(text) if o}


def stored_names(plane: ControlPlane, text: str) -> set[str]:
    got = plane.kubectl("get", "-n", NS, "-f", "-", "-o", "name", "--ignore-not-found", stdin=text, check=False)
    assert got.returncode == 0, got.stderr
    # `-o name` prints `kind.group/name`; keep `kind/name` to compare with the manifest.
    return {f"{line.split('/')[0].split('.')[0]}/{line.split('/', 1)[1]}" for line in got.stdout.split()}


@pytest.fixture(scope="module")
def release(plane: ControlPlane, core: kubernetes.client.CoreV1Api) -> dict[str, Any]:
    """The steps, in order, each recorded for the tests below: install, upgrade, uninstall."""
    steps: dict[str, Any] = {}
    with HookKubelet(plane, core) as kubelet:
        steps["install"] = run_helm(plane, "install", RELEASE, str(CHART), "-n", NS, "--create-namespace",
                                    f"--timeout={HELM_TIMEOUT_SECONDS}s")
        steps["installed"] = manifest(plane) if steps["install"].returncode == 0 else ""
        steps["stored after install"] = stored_names(plane, steps["installed"]) if steps["installed"] else set()
        steps["ca bundles after install"] = _ca_bundles(plane)
        steps["upgrade"] = run_helm(plane, "upgrade", RELEASE, str(CHART), "-n", NS, "--set", "webhook.replicas=3",
                                    "--set", "logLevel=debug", f"--timeout={HELM_TIMEOUT_SECONDS}s")
        steps["upgraded"] = manifest(plane) if steps["upgrade"].returncode == 0 else ""
        steps["stored after upgrade"] = stored_names(plane, steps["upgraded"]) if steps["upgraded"] else set()
        steps["ca bundles after upgrade"] = _ca_bundles(plane)
        steps["hook runs"] = dict(kubelet.done)
        steps["hook logs"] = dict(kubelet.logs)
    steps["uninstall"] = run_helm(plane, "uninstall", RELEASE, "-n", NS, f"--timeout={HELM_TIMEOUT_SECONDS}s")
    steps["stored after uninstall"] = _eventually_gone(plane, steps["upgraded"])
    return steps


def _ca_bundles(plane: ControlPlane) -> set[str]:
    got = plane.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o",
                        "jsonpath={.items[*].webhooks[*].clientConfig.caBundle}", check=False)
    return set(got.stdout.split())


def _eventually_gone(plane: ControlPlane, text: str, timeout: float = 60.0) -> set[str]:
    """What of the release is still stored: deletion of some objects (a Deployment's dependents) is the
    garbage collector's, so it is given a moment."""
    deadline = time.monotonic() + timeout
    left = stored_names(plane, text) if text else set()
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = stored_names(plane, text)
    return left


def test_helm_install_is_accepted_and_every_rendered_object_is_stored(release: dict[str, Any]) -> None:
    assert release["install"].returncode == 0, release["install"].stderr
    names = rendered_names(release["installed"])
    assert {"mutatingwebhookconfiguration/tls-injector", "validatingwebhookconfiguration/tls-injector",
            "deployment/tls-injector"} <= names
    assert any(n.startswith("clusterrole/") for n in names)
    assert any(n.startswith("validatingadmissionpolicy/") for n in names)
    assert release["stored after install"] == names


def test_the_install_hook_ran_as_its_account_and_filled_every_ca_bundle(release: dict[str, Any]) -> None:
    assert release["hook runs"], "helm created no hook pod"
    assert all(code == 0 for code in release["hook runs"].values()), release["hook logs"]
    assert len(release["ca bundles after install"]) == 1, "every entry trusts the bootstrap's CA"
    assert "" not in release["ca bundles after install"]


def test_helm_upgrade_with_other_values_is_accepted_and_keeps_the_ca(release: dict[str, Any]) -> None:
    assert release["upgrade"].returncode == 0, release["upgrade"].stderr
    assert "replicas: 3" in release["upgraded"]
    assert release["stored after upgrade"] == rendered_names(release["upgraded"])
    assert len(release["hook runs"]) == 2, "the post-upgrade hook ran too"
    assert release["ca bundles after upgrade"] == release["ca bundles after install"]


def test_helm_uninstall_removes_every_object_of_the_release(release: dict[str, Any]) -> None:
    assert release["uninstall"].returncode == 0, release["uninstall"].stderr
    assert release["stored after uninstall"] == set()
