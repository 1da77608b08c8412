"""A one-node Kubernetes cluster whose pods really run, for the node tier (tests/node).

Inside a network and mount namespace of its own (tests/node/namespace.py):
- the control plane of the cluster tier (tests/cluster/controlplane.py: etcd, kube-apiserver,
  kube-controller-manager), composed here with three changes: its processes enter the namespace, the
  apiserver binds 0.0.0.0 and advertises the node's address (pods reach it at the `kubernetes`
  Service, whose Endpoints the apiserver keeps: `--endpoint-reconciler-type=lease`), and the Service
  range is 10.96.0.0/16 (kube-proxy makes the ClusterIPs real, so they no longer need to be loopback);
- kube-scheduler;
- containerd 2 (CRI), runc and the CNI bridge + host-local plugins (Debian's), pods in 10.244.0.0/24;
- the kubelet (cgroup v1 with `failCgroupV1: false`, the cgroupfs driver under a cgroup root of its
  own, `protectKernelDefaults: true`);
- kube-proxy in iptables mode, with conntrack tuning off (those are the host's settings) and
  `masqueradeAll` (a pod reaching a Service backed by a pod on the same bridge gets its answers back
  through the node, with no br_netfilter needed).

Versions and builds: tools/kube.py and tools/node.py. Images: tests/node/images.py.
The workarounds this machine kind needs were measured first; docs/node-tests.md gives them and why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.cluster.controlplane import ControlPlane
from tests.node import images
from tests.node.host import HostState
from tests.node.namespace import NODE_IP, Forwarder, NodeNamespace

TOOLS = Path(__file__).resolve().parents[2] / "tools"
NODE_NAME = "tls-injector-node"
POD_CIDR = "10.244.0.0/24"
SERVICE_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
CGROUP_ROOT_PREFIX = "tls-injector-node-"
CGROUP_V1 = Path("/sys/fs/cgroup")
# Measured on 2 idle cores: node Ready 4 s after the kubelet starts, a pod Ready in about a second.
# A loaded CI machine has been seen at several times the control plane's figures: these are failures.
NODE_READY_SECONDS = 120.0
POD_READY_SECONDS = 120.0
STOP_SECONDS = 15.0


def node_binaries() -> tuple[Path, Path]:
    """The folder of the node binaries and the path of node-probe; builds them when missing."""
    sys.path.insert(0, str(TOOLS))
    try:
        import node  # tools/node.py
    finally:
        sys.path.remove(str(TOOLS))
    return Path(node.build()), Path(node.probe_path())


def images_cache() -> Path:
    configured = os.environ.get("TLS_INJECTOR_NODE_CACHE")
    root = Path(configured) if configured else Path.home() / ".cache" / "tls-injector" / "node"
    return root / "images"


class Node:
    """`start()` then `stop()`; `plane` is the control plane (admin kubeconfig, kubectl)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bin, self.probe = node_binaries()
        self.namespace = NodeNamespace(folder / "namespace")
        self.cgroup_root = CGROUP_ROOT_PREFIX + uuid.uuid4().hex[:8]
        self.plane: ControlPlane | None = None
        self._forwarder: Forwarder | None = None
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.pause = images.pause_image(images_cache(), self.probe)
        self.busybox = images.busybox_image(images_cache(), self.probe)
        self.containerd_socket = folder / "containerd" / "containerd.sock"
        self.registry_hosts = folder / "containerd" / "certs.d"

    # ---- the control plane -------------------------------------------------------------------------

    @property
    def cp(self) -> ControlPlane:
        if self.plane is None:
            raise RuntimeError("the node is not started")
        return self.plane

    def kubectl(self, *argv: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return self.cp.kubectl(*argv, stdin=stdin, check=check, timeout=timeout)

    def get_json(self, path: str) -> dict[str, Any]:
        status, body = self.cp.get(path)
        if status != 200:
            raise AssertionError(f"GET {path}: {status} {body[:500]!r}")
        return dict(json.loads(body))

    # ---- processes ---------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.folder / f"{name}.log").open("ab") as log:
            self._processes[name] = subprocess.Popen(
                [*self.namespace.prefix(), *argv], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, name: str, lines: int = 40) -> str:
        for folder in (self.folder, self.cp.folder if self.plane else self.folder):
            path = folder / f"{name}.log"
            if path.exists():
                return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def diagnosis(self, *names: str, lines: int = 30) -> str:
        """Log tails to put in a failure message: the node's processes by default."""
        chosen = names or ("kubelet", "containerd", "kube-scheduler", "kube-proxy")
        return "\n".join(f"--- {name} (last {lines} lines) ---\n{self.log_tail(name, lines)}" for name in chosen)

    def _check_alive(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name, 60)}")

    def ctr(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return self.namespace.run(str(self.bin / "ctr"), f"--address={self.containerd_socket}", "-n", "k8s.io",
                                  *argv, timeout=timeout)

    def import_image(self, archive: Path, *, by_digest: bool = False) -> None:
        """`by_digest`: also name it `<repository>@<manifest digest>`, as a pull by digest names it, so a pod
        naming the image by digest finds it here (`ctr images import --digests` names it `import-<date>@<index
        digest>`, which no pod names)."""
        self.ctr("images", "import", "--snapshotter=overlayfs", str(archive), timeout=300)
        if by_digest:
            name, digest = images.archive_name_and_digest(archive)
            self.ctr("images", "tag", name, f"{name.rsplit(':', 1)[0]}@{digest}")

    def trust_registry(self, host: str, ca: Path) -> None:
        """containerd pulls from `host` (HOST:PORT, reachable inside the node) over TLS verified by `ca`
        (containerd 2's hosts.toml under the CRI registry's config_path; no restart needed)."""
        folder = self.registry_hosts / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(f'server = "https://{host}"\n\n[host."https://{host}"]\n'
                                           f'  capabilities = ["pull", "resolve"]\n  ca = "{ca}"\n')

    # ---- start -------------------------------------------------------------------------------------

    def start(self) -> Node:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.namespace.start()
        # The apiserver's client certificate for the kubelet's API (port-forward, logs, exec go through it),
        # written by the control plane's PKI below under this name. Its group is system:masters: the
        # kubelet authorizes each call by a SubjectAccessReview, and this cluster is the test's own.
        kubelet_client = self.folder / "control-plane" / "pki" / "apiserver-kubelet-client"
        self.plane = ControlPlane(
            self.folder / "control-plane", wrap=self.namespace.prefix(),
            apiserver_ips=(NODE_IP, KUBERNETES_SERVICE_IP), service_range=SERVICE_RANGE,
            apiserver_args=[f"--advertise-address={NODE_IP}", "--bind-address=0.0.0.0",
                            "--endpoint-reconciler-type=lease",
                            f"--kubelet-client-certificate={kubelet_client}.crt",
                            f"--kubelet-client-key={kubelet_client}.key",
                            # the node's name resolves nowhere (no DNS): reach the kubelet at its address
                            "--kubelet-preferred-address-types=InternalIP"])
        pair = self.plane.pki.client(kubelet_client.name, "kube-apiserver-kubelet-client", "system:masters")
        assert pair.cert == kubelet_client.with_suffix(".crt"), pair
        self._forwarder = Forwarder(self.namespace, self.plane.port).start()
        self.plane.start()
        self._start_containerd()
        self.import_image(self.pause.archive)
        self.import_image(self.busybox.archive)
        self._start_kubelet()
        self._start_scheduler()
        self._start_kube_proxy()
        self.wait_node_ready()
        return self

    def _start_containerd(self) -> None:
        folder = self.folder / "containerd"
        (folder / "cni").mkdir(parents=True, exist_ok=True)
        self.registry_hosts.mkdir(parents=True, exist_ok=True)
        (folder / "cni" / "10-bridge.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "tls-injector-node",
            "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                         "hairpinMode": True,
                         "ipam": {"type": "host-local", "dataDir": str(folder / "ipam"),
                                  "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                        {"type": "loopback"}]}))
        (folder / "config.toml").write_text(f"""version = 4
root = "{folder / 'root'}"
state = "{folder / 'state'}"

[plugins.'io.containerd.server.v1.grpc']
  address = "{self.containerd_socket}"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "{self.containerd_socket}.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "{folder / 'opt'}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{self.pause.name}"
  # Registries the node may pull from: a folder per host (hosts.toml, read at each pull), empty until a
  # test adds one (trust_registry).
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{self.registry_hosts}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{folder / 'cni'}"
""")
        self._spawn("containerd", [str(self.bin / "containerd"), f"--config={folder / 'config.toml'}",
                                   "--log-level=warn"])
        deadline = time.monotonic() + 60
        while not self.containerd_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd made no socket in 60 s:\n{self.log_tail('containerd')}")
            time.sleep(0.2)
        self.ctr("version")

    def _make_cgroup_root(self) -> None:
        """The kubelet wants its cgroup root to exist in every hierarchy; a new cpuset cgroup starts with
        no CPUs or memory nodes, so it gets its parent's."""
        for hierarchy in CGROUP_V1.iterdir():
            if hierarchy.is_symlink() or not os.path.ismount(hierarchy):
                continue
            root = hierarchy / self.cgroup_root
            root.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / name).exists():
                    (root / name).write_text((hierarchy / name).read_text())

    def _start_kubelet(self) -> None:
        self._make_cgroup_root()
        folder = self.folder / "kubelet"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "resolv.conf").write_text("# the node tier has no DNS server; pods name Services by hostAliases\n"
                                            "nameserver 127.0.0.1\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{self.cgroup_root}",
            "protectKernelDefaults": True, "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": NODE_IP, "port": 10250, "readOnlyPort": 0, "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.cp.pki.ca.cert)}},
            "authorization": {"mode": "Webhook"},
            "clusterDomain": "cluster.local", "resolvConf": str(folder / "resolv.conf"),
            "podLogsDir": str(folder / "pod-logs"),
            "registerNode": True, "rotateCertificates": False, "serializeImagePulls": False,
            # A shared CI disk is not this node's: evict only when it is truly full, and never
            # collect the images the tests imported (nothing could pull them back).
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "podPidsLimit": 4096, "maxPods": 110,
        }
        (folder / "config.json").write_text(json.dumps(config))
        self._spawn("kubelet", [
            str(self.bin / "kubelet"), f"--config={folder / 'config.json'}",
            f"--kubeconfig={self.cp.node_kubeconfig(NODE_NAME)}", f"--root-dir={folder / 'root'}",
            f"--cert-dir={folder / 'pki'}", f"--node-ip={NODE_IP}", f"--hostname-override={NODE_NAME}",
            "--v=1"])

    def _start_scheduler(self) -> None:
        pair = self.cp.pki.client("scheduler", "system:kube-scheduler")
        kubeconfig = self.cp._write_kubeconfig("scheduler", {"client-certificate": str(pair.cert),
                                                             "client-key": str(pair.key)})
        self._spawn("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259", "--v=1"])

    def _start_kube_proxy(self) -> None:
        pair = self.cp.pki.client("kube-proxy", "system:kube-proxy")
        kubeconfig = self.cp._write_kubeconfig("kube-proxy", {"client-certificate": str(pair.cert),
                                                              "client-key": str(pair.key)})
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)}, "mode": "iptables",
            "hostnameOverride": NODE_NAME, "clusterCIDR": POD_CIDR,
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            # Zeros: kube-proxy leaves nf_conntrack_max and the conntrack timeouts (the host's) alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "udpTimeout": "0s", "udpStreamTimeout": "0s"},
            "iptables": {"masqueradeAll": True},
        }
        path = self.folder / "kube-proxy.json"
        path.write_text(json.dumps(config))
        self._spawn("kube-proxy", [str(self.bin / "kube-proxy"), f"--config={path}", "--v=1"])

    # ---- waits -------------------------------------------------------------------------------------

    def wait_node_ready(self, timeout: float = NODE_READY_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        conditions: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            self._check_alive()
            status, body = self.cp.get(f"/api/v1/nodes/{NODE_NAME}")
            if status == 200:
                conditions = json.loads(body).get("status", {}).get("conditions", [])
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return
            time.sleep(0.5)
        raise RuntimeError(f"node {NODE_NAME} not Ready in {timeout:.0f} s; conditions {conditions}\n"
                           f"{self.diagnosis()}")

    def wait_pod(self, namespace: str, name: str, *, phase: str = "Running", ready: bool = True,
                 timeout: float = POD_READY_SECONDS) -> dict[str, Any]:
        """The pod once it is in `phase` (and Ready, for Running); else a failure with what is known."""
        deadline = time.monotonic() + timeout
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            status, body = self.cp.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            if status == 200:
                pod = json.loads(body)
                current = pod.get("status", {}).get("phase")
                conditions = pod.get("status", {}).get("conditions", [])
                is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
                if current == phase and (is_ready or not ready or phase != "Running"):
                    return pod
                if current in ("Failed", "Succeeded") and current != phase:
                    break
            time.sleep(0.3)
        raise AssertionError(f"pod {namespace}/{name} not {phase} in {timeout:.0f} s: status "
                             f"{json.dumps(pod.get('status', {}))[:3000]}\n{self.pod_events(namespace, name)}\n"
                             f"{self.diagnosis()}")

    def pod_events(self, namespace: str, name: str) -> str:
        done = self.kubectl("get", "events", "-n", namespace, f"--field-selector=involvedObject.name={name}",
                            "-o", "custom-columns=REASON:.reason,MESSAGE:.message", check=False)
        return f"--- events of {namespace}/{name} ---\n{done.stdout}{done.stderr}"

    def container_log(self, namespace: str, pod: str, container: str, uid: str = "*") -> str:
        """A container's output, read from the kubelet's pod log folder (no apiserver-to-kubelet path);
        `uid` picks one pod of that name (a StatefulSet's pod re-created), else any."""
        root = self.folder / "kubelet" / "pod-logs"
        found = sorted(root.glob(f"{namespace}_{pod}_{uid}/{container}/*.log"))
        if not found:
            return ""
        lines = found[-1].read_text(errors="replace").splitlines()
        # CRI log lines: "<time> <stream> <tag> <text>"
        return "\n".join(line.split(" ", 3)[3] if line.count(" ") >= 3 else line for line in lines)

    # ---- stop --------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Everything this node started ends, and the namespaces and cgroups go with it. How long each step
        took is written to stop.log in the node's folder (docs/node-tests.md, "Timings")."""
        steps: list[str] = []
        began = time.monotonic()

        def took(step: str) -> None:
            nonlocal began
            steps.append(f"{step} {time.monotonic() - began:.1f} s")
            began = time.monotonic()

        for name in ("kube-proxy", "kube-scheduler", "kubelet", "containerd"):
            process = self._processes.pop(name, None)
            killed = False
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    killed = True
            took(name + (" (killed after SIGTERM's wait)" if killed else ""))
        if self.plane is not None:
            self.plane.stop()
        took("control plane")
        self._kill_leftovers()
        took("leftovers")
        if self._forwarder is not None:
            self._forwarder.stop()
        self.namespace.stop()
        took("namespace")
        self._remove_cgroups()
        took("cgroups")
        with contextlib.suppress(OSError):
            (self.folder / "stop.log").write_text("; ".join(steps) + "\n")

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for procs in CGROUP_V1.glob(f"*/{self.cgroup_root}/**/cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in procs.read_text().split())
        return pids

    def _kill_leftovers(self) -> None:
        """The shims and containers outlive containerd by design: kill every process still in the
        node's mount namespace or in its cgroups (the holder is killed last, by namespace.stop())."""
        if self.namespace._holder is None:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = (set(self.namespace.members()) | self._cgroup_pids()) - {self.namespace.pid}
            if not left:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        raise RuntimeError(f"processes of the node still alive after 30 s: {sorted(left)}")

    def _remove_cgroups(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            folders = sorted((p for p in CGROUP_V1.glob(f"*/{self.cgroup_root}") if p.is_dir()), key=str)
            nested = sorted((d for top in folders for d in top.rglob("*") if d.is_dir()),
                            key=lambda d: len(d.parts), reverse=True)
            errors = []
            for folder in [*nested, *folders]:
                try:
                    folder.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as error:
                    errors.append(f"{folder}: {error}")
            if not errors:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("cgroups of the node not removed: " + "; ".join(errors[:5]))
            time.sleep(0.3)


@contextlib.contextmanager
def own_node(folder: Path, before: HostState | None = None) -> Iterator[Node]:
    """A node started in `folder` and stopped on the way out; the host must then be as it was `before`
    (taken now when not given)."""
    before = before or HostState.take()
    node = Node(folder)
    try:
        node.start()
        yield node
    finally:
        node.stop()
        changed = before.differences(HostState.take())
        assert not changed, "the node changed the host:\n" + "\n".join(changed)
