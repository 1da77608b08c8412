"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager of the
release tools/kube.py pins, built from their Go modules.

The apiserver is configured as a kubeadm cluster's is where it matters to us: TLS with client
certificates, RBAC and Node authorization, service-account tokens, the default admission plugins
(MutatingAdmissionWebhook, ValidatingAdmissionWebhook, ValidatingAdmissionPolicy, ServiceAccount,
...) plus NodeRestriction. The controller manager runs every default controller with one service
account per controller, as kubeadm's does, so Deployments become ReplicaSets become Pods, and
the garbage collector, the namespace controller and the token controller act as in a real cluster.
There is no kubelet and no scheduler: pods stay Pending, which is all admission needs.

Two departures, each for a reason:
- The Service IP range is a /16 inside 127.0.0.0/8. The apiserver calls a webhook registered by
  Service reference at that Service's ClusterIP (its default resolver); with no kube-proxy here, a
  ClusterIP in the loopback range is one our webhook can listen on, so the shipped registrations
  (service `tls-injector`, port 443) are used unchanged. Each control plane takes a random /16,
  so two suites on one machine do not share addresses.
- `--endpoint-reconciler-type=none`: the apiserver would otherwise write its own 127.0.0.1 into the
  `kubernetes` Endpoints, which validation refuses (loopback), and log that every ten seconds.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config

from tests.cluster.pki import ClusterPKI

TOOLS = Path(__file__).resolve().parents[2] / "tools"
# The whole start (etcd, then the apiserver's post-start hooks, then RBAC bootstrap) takes 10-20 s on
# 2 idle cores; a loaded CI machine has been seen at three times that. Past this it is a failure.
START_DEADLINE_SECONDS = 180.0
# A stopped control plane's data is thrown away, so nothing waits for its graceful shutdown: the apiserver
# holds SIGTERM until its open watches end (measured: 15 s at each node test's teardown, the whole wait).
# Each process gets this long to exit on SIGTERM, then SIGKILL.
STOP_GRACE_SECONDS = 2.0


def binaries() -> Path:
    """The folder of the built binaries; builds them when missing (tools/kube.py)."""
    sys.path.insert(0, str(TOOLS))
    try:
        import kube
    finally:
        sys.path.remove(str(TOOLS))
    return Path(kube.build())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_client(kubeconfig: Path) -> kubernetes.client.ApiClient:
    """The official client for a kubeconfig of this tier (admin, a service account's token, a node)."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig),  # type: ignore[no-untyped-call]
                                       client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def kubeconfig(*, server: str, ca: Path, user: dict[str, str], name: str = "cluster") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }


class ControlPlane:
    """Start with `start()`, stop with `stop()`; `admin_kubeconfig` is cluster-admin."""

    def __init__(self, folder: Path, *, wrap: Sequence[str] = (), apiserver_ips: tuple[str, ...] = (),
                 apiserver_args: Sequence[str] = (), service_range: str = "") -> None:
        """`wrap` prefixes every process's command (the node tier enters its network namespace so);
        `apiserver_args` come after the defaults, so they add flags or override one (the last wins)."""
        self.folder = folder
        self.bin = binaries()
        self.pki = ClusterPKI(folder / "pki", apiserver_ips=apiserver_ips)
        self.service_range = service_range or f"127.{random.randint(100, 250)}.0.0/16"
        self._wrap = list(wrap)
        self._apiserver_args = list(apiserver_args)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._etcd_port = free_port()
        self.admin_kubeconfig = self._write_kubeconfig("admin", {
            "client-certificate": str(self.pki.admin.cert), "client-key": str(self.pki.admin.key)})
        self._cm_kubeconfig = self._write_kubeconfig("controller-manager", {
            "client-certificate": str(self.pki.controller_manager.cert),
            "client-key": str(self.pki.controller_manager.key)})

    def _write_kubeconfig(self, stem: str, user: dict[str, str]) -> Path:
        path = self.folder / f"{stem}.kubeconfig"
        path.write_text(json.dumps(kubeconfig(server=self.url, ca=self.pki.ca.cert, user=user)))
        path.chmod(0o600)
        return path

    def node_kubeconfig(self, node: str) -> Path:
        """A kubelet's credentials for `node`: what NodeRestriction and the Node authorizer judge."""
        pair = self.pki.client(f"node-{node}", f"system:node:{node}", "system:nodes")
        return self._write_kubeconfig(f"node-{node}", {"client-certificate": str(pair.cert),
                                                       "client-key": str(pair.key)})

    def token_kubeconfig(self, stem: str, token: str) -> Path:
        """A kubeconfig that authenticates with a bearer token (a service account's, say)."""
        return self._write_kubeconfig(stem, {"token": token})

    # ---- processes ---------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.folder / f"{name}.log").open("ab") as log:  # the child keeps its own descriptor
            self._processes[name] = subprocess.Popen(
                [*self._wrap, str(self.bin / name), *argv], stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.folder / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def start(self) -> ControlPlane:
        peer = free_port()
        etcd_url = f"http://127.0.0.1:{self._etcd_port}"
        self._spawn("etcd", [
            "--name=default", f"--data-dir={self.folder / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            # A test cluster's data is thrown away: no fsync makes its writes ~10x cheaper on this disk.
            "--unsafe-no-fsync", "--log-level=warn",
        ])
        self._spawn("kube-apiserver", [
            "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            f"--etcd-servers={etcd_url}",
            f"--tls-cert-file={self.pki.apiserver.cert}", f"--tls-private-key-file={self.pki.apiserver.key}",
            f"--client-ca-file={self.pki.ca.cert}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--enable-bootstrap-token-auth=true", "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={self.service_range}", "--endpoint-reconciler-type=none",
            "--profiling=false", "--v=1", *self._apiserver_args,
        ])
        self._wait_ready()
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={self._cm_kubeconfig}", f"--authentication-kubeconfig={self._cm_kubeconfig}",
            f"--authorization-kubeconfig={self._cm_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
            f"--service-account-private-key-file={self.pki.sa_key}", f"--root-ca-file={self.pki.ca.cert}",
            "--use-service-account-credentials=true", "--controllers=*", "--v=1",
        ])
        self.wait_for_service_account("default", "default")
        return self

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context

    def get(self, path: str) -> tuple[int, bytes]:
        """A GET as cluster-admin, without the kubernetes client: for readiness and quick looks."""
        try:
            with urllib.request.urlopen(self.url + path, context=self._ssl_context(), timeout=10) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read()

    def _check_alive(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_SECONDS
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"kube-apiserver not ready in {START_DEADLINE_SECONDS:.0f} s:\n"
                           f"{self.log_tail('kube-apiserver')}")

    def wait_for_service_account(self, namespace: str, name: str, timeout: float = 120.0) -> None:
        """The service-account controller creates `default` in each new namespace; pods wait for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if self.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")[0] == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"no service account {namespace}/{name} after {timeout:.0f} s:\n"
                           f"{self.log_tail('kube-controller-manager')}")

    def kubectl(self, *argv: str, kubeconfig: Path | None = None, stdin: str | None = None,
                check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        config = kubeconfig or self.admin_kubeconfig
        done = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={config}", *argv], input=stdin, capture_output=True,
            text=True, timeout=timeout, check=False, env={**os.environ, "KUBECONFIG": str(config)})
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
        return done

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            process = self._processes.pop(name, None)
            if process is None:
                continue
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        shutil.rmtree(self.folder / "etcd", ignore_errors=True)

    def compact_etcd(self) -> int:
        """Compact etcd's history to its current revision (through etcd's own JSON gateway): a watch
        from any earlier resourceVersion then gets 410 Gone once the apiserver's cache cannot serve it."""
        def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
            request = urllib.request.Request(f"http://127.0.0.1:{self._etcd_port}{path}",
                                             data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(request, timeout=10) as answer:
                return dict(json.loads(answer.read()))

        revision = int(call("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def restart_apiserver(self) -> None:
        """Stop the apiserver and start it again on the same port and etcd (its watches end)."""
        process = self._processes["kube-apiserver"]
        os.killpg(process.pid, signal.SIGTERM)
        try:
            # Its graceful shutdown waits for open watches (ours included) to end: seconds to a minute.
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # then as a crash: what clients must survive anyway
            process.wait()
        argv = [str(arg) for arg in process.args[1 + len(self._wrap):]]  # type: ignore[index,union-attr]
        self._spawn("kube-apiserver", argv)
        self._wait_ready()
