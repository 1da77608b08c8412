"""The shipped install on the real control plane, run as a cluster would run it.

`kubectl apply --server-side -k` of manifests/base and certs-bootstrap, exactly as docs/install.md
says. No kubelet runs here, so the pods those Deployments ask for stay Pending; their processes run
on this machine instead, each with the credentials its pod would have: a token of its own service
account (TokenRequest, as the kubelet's projected token), under the shipped RBAC and policies.
- the bootstrap Job's `tls-injector bootstrap`, as `tls-injector-bootstrap`;
- the reconciler, as `tls-injector-reconciler`, which then keeps the webhook's serving Secret and the
  configurations' caBundle, as in a cluster;
- the webhook `serve`, with no API access (the files its pod would mount, written from the Secret and
  ConfigMap the reconciler made), listening on the `tls-injector` Service's ClusterIP, port 443, where
  the apiserver calls it (tests/cluster/controlplane.py says why that address is reachable here).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes.client

from tests.cluster.controlplane import ControlPlane, free_port

ROOT = Path(__file__).resolve().parents[2]
NS = "tls-injector"
WEBHOOK_FLAGS = ("--webhook-configurations=tls-injector", "--webhook-service=tls-injector",
                 "--webhook-secret=tls-injector-webhook-tls")


def wait_until(what: str, predicate: Any, *, timeout: float = 120.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Installation:
    def __init__(self, cluster: ControlPlane, admin: kubernetes.client.ApiClient, folder: Path) -> None:
        self.cluster = cluster
        self.core = kubernetes.client.CoreV1Api(admin)
        self.folder = folder
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.service_ip = ""
        self.bootstrap_result: subprocess.CompletedProcess[str] | None = None
        self.metrics_port = 0
        self.probe_port = 0

    # ---- credentials ---------------------------------------------------------------------------------

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        self.cluster.wait_for_service_account(namespace, name)
        token = self.core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        return self.cluster.token_kubeconfig(f"sa-{namespace}-{name}", token)

    # ---- processes -----------------------------------------------------------------------------------

    def _spawn(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("ab") as log:  # the child keeps its own descriptor
            process = subprocess.Popen([sys.executable, "-m", "tls_injector", *argv], cwd=ROOT,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._processes[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def alive(self, name: str) -> bool:
        process = self._processes.get(name)
        return process is not None and process.poll() is None

    def stop(self, name: str) -> None:
        process = self._processes.pop(name, None)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def stop_all(self) -> None:
        for name in list(self._processes):
            self.stop(name)

    # ---- the steps -----------------------------------------------------------------------------------

    def apply_manifests(self) -> None:
        for folder in ("manifests/base", "certs-bootstrap"):
            self.cluster.kubectl("apply", "--server-side", "--field-manager=tls-injector-install",
                                 "-k", str(ROOT / folder))
        service = self.core.read_namespaced_service("tls-injector", NS)
        self.service_ip = service.spec.cluster_ip

    def bootstrap(self) -> subprocess.CompletedProcess[str]:
        kubeconfig = self.service_account_kubeconfig(NS, "tls-injector-bootstrap")
        return subprocess.run([sys.executable, "-m", "tls_injector", "bootstrap", f"--kubeconfig={kubeconfig}",
                               f"--namespace={NS}", *WEBHOOK_FLAGS], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)

    def start_reconciler(self, *extra: str) -> subprocess.Popen[bytes]:
        kubeconfig = self.service_account_kubeconfig(NS, "tls-injector-reconciler")
        self.metrics_port = free_port()
        return self._spawn("reconciler", "reconcile", f"--kubeconfig={kubeconfig}", f"--namespace={NS}",
                           *WEBHOOK_FLAGS, f"--webhook-address={self.service_ip}:443",
                           "--metrics-host=127.0.0.1", f"--metrics-port={self.metrics_port}",
                           "--log-level=info", *extra)

    def mount_files(self) -> tuple[Path, Path, Path]:
        """The files the webhook pod would mount: its serving Secret and its namespace's bundle."""
        secret = wait_until("the webhook's serving Secret", lambda: self._read_secret("tls-injector-webhook-tls"))
        bundle = wait_until("the trust bundle in tls-injector", self._read_bundle)
        files = self.folder / "webhook-mounts"
        files.mkdir(exist_ok=True)
        cert, key, trust = files / "tls.crt", files / "tls.key", files / "ca-bundle.crt"
        cert.write_bytes(base64.b64decode(secret["tls.crt"]))
        key.write_bytes(base64.b64decode(secret["tls.key"]))
        key.chmod(0o600)
        trust.write_text(bundle)
        return cert, key, trust

    def _read_secret(self, name: str) -> dict[str, str] | None:
        try:
            return dict(self.core.read_namespaced_secret(name, NS).data or {}) or None
        except kubernetes.client.ApiException:
            return None

    def _read_bundle(self) -> str | None:
        try:
            return str(self.core.read_namespaced_config_map("tls-injector-trust-bundle", NS).data["ca-bundle.crt"])
        except (kubernetes.client.ApiException, KeyError, TypeError):
            return None

    def start_webhook(self, *extra: str) -> subprocess.Popen[bytes]:
        cert, key, trust = self.mount_files()
        self.probe_port = free_port()
        process = self._spawn("webhook", "serve", "--no-reconciler", f"--host={self.service_ip}", "--port=443",
                              f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
                              f"--trust-bundle-file={trust}", f"--probe-port={self.probe_port}",
                              "--drain-seconds=1", "--log-level=info",
                              # 1.37 serves pod certificates; the webhook has no API access to find out.
                              "--pod-certificates=on", *extra)
        wait_until("the webhook's /readyz", self._webhook_ready, timeout=60)
        return process

    def _webhook_ready(self) -> bool:
        process = self._processes.get("webhook")
        if process is not None and process.poll() is not None:
            raise AssertionError(f"serve exited with {process.returncode}:\n{self.log('webhook')[-3000:]}")
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{self.service_ip}:{self.probe_port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False
