"""The node's own network and mount namespaces, and a door into them from the test process.

Every process of the node tier (etcd, the apiserver, the controllers, containerd, the kubelet,
kube-proxy, and the pods under them) runs inside one network namespace made here, so no packet leaves
it and no rule, route or address of the host's changes. A holder process (`unshare`) makes it and
keeps it alive; the others enter it with `nsenter --target <holder> --net --mount`.

The holder also makes a private mount namespace (propagation slave: the host's mounts are seen,
ours never reach the host), in which:
- /run, /var/lib and /var/log are empty tmpfs: containerd's shim sockets (/run/containerd/s), runc's
  state, the iptables lock, the CNI cache and the kubelet's /var/log/containers links stay inside;
- the three kernel tunables the kubelet checks (vm.overcommit_memory=1, kernel.panic=10,
  kernel.panic_on_oops=1) are files of ours bind-mounted over their /proc/sys entries, so the kubelet,
  run with protectKernelDefaults, finds what it wants and the machine keeps its own values.

Inside the network namespace: lo, and a veth pair with both ends inside; the node address is a /32 on
one end with the default route through it, so the kubelet, kube-proxy and the apiserver have a
routable address and nothing is routed off the machine.

The test process reaches the apiserver through `Forwarder`: a listener on the host's 127.0.0.1 whose
connections are relayed to the same port on the namespace's loopback by a thread that joined the
namespace (setns applies to one thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

NODE_IP = "10.200.0.1"
KERNEL_TUNABLES = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
_CLONE_NEWNET = 0x40000000
_READY_WITHIN_SECONDS = 30.0

_SETUP = """set -e
mount -t tmpfs -o mode=0755 tls-injector-node-run /run
mount -t tmpfs -o mode=0755 tls-injector-node-varlib /var/lib
mount -t tmpfs -o mode=0755 tls-injector-node-varlog /var/log
{tunables}
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add {ip}/32 dev veth0
ip link set veth0 up
ip link set veth1 up
ip route add default dev veth0
echo ready
exec sleep infinity
"""


class NodeNamespace:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._holder: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        if self._holder is None:
            raise RuntimeError("the node namespace is not started")
        return self._holder.pid

    def prefix(self) -> list[str]:
        """What to put before a command to run it inside the node."""
        return ["nsenter", f"--target={self.pid}", "--net", "--mount", "--"]

    def inode(self, kind: str) -> int:
        return os.stat(f"/proc/{self.pid}/ns/{kind}").st_ino

    def start(self) -> NodeNamespace:
        self.folder.mkdir(parents=True, exist_ok=True)
        tunables = []
        for name, value in KERNEL_TUNABLES.items():
            file = self.folder / ("sysctl-" + name.replace("/", "."))
            file.write_text(value + "\n")
            tunables.append(f"mount --bind {file} /proc/sys/{name}")
        script = _SETUP.format(tunables="\n".join(tunables), ip=NODE_IP)
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "slave", "sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self._holder.stdout is not None
        ready, _, _ = select.select([self._holder.stdout], [], [], _READY_WITHIN_SECONDS)
        line = self._holder.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self.stop()
            stderr = self._holder.stderr.read() if self._holder.stderr else ""
            raise RuntimeError(f"the node namespace was not made in {_READY_WITHIN_SECONDS:.0f} s: {stderr}")
        return self

    def run(self, *argv: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.prefix(), *argv], capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} (in the node) exited {done.returncode}:\n{done.stderr}")
        return done

    def members(self) -> list[int]:
        """Every process in the node's mount namespace (the holder, the node's processes, the shims)."""
        try:
            mine = os.stat(f"/proc/{self.pid}/ns/mnt").st_ino
        except OSError:  # the holder is gone (a failed start): whatever was in it is not findable this way
            return []
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/mnt").st_ino == mine:
                    found.append(int(entry))
        return found

    def stop(self) -> None:
        if self._holder is None:
            return
        if self._holder.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._holder.pid, signal.SIGKILL)
        self._holder.wait(timeout=30)
        for stream in (self._holder.stdout, self._holder.stderr):
            if stream is not None:
                stream.close()


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({path})")
    finally:
        os.close(fd)


class Forwarder:
    """127.0.0.1:`port` on the host relayed to 127.0.0.1:`port` inside the node's network namespace."""

    def __init__(self, namespace: NodeNamespace, port: int) -> None:
        self.port = port
        self._netns = f"/proc/{namespace.pid}/ns/net"
        self._listener = socket.create_server(("127.0.0.1", port))
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._entered = threading.Event()
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._accept, name="node-forwarder", daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        self._entered.wait(10)
        if self._error is not None or not self._entered.is_set():
            raise RuntimeError(f"the forwarder did not enter the node's network namespace: {self._error}")
        return self

    def _accept(self) -> None:
        try:
            _setns(self._netns)  # this thread, and the threads it starts, live in the node's namespace
        except OSError as error:
            self._error = error
            return
        finally:
            self._entered.set()
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stop() shut the listener
            try:
                upstream = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            finished = threading.Semaphore(0)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target, finished), daemon=True).start()
            threading.Thread(target=self._close_after, args=(client, upstream, finished), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, finished: threading.Semaphore) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
            target.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        finally:
            finished.release()

    def _close_after(self, client: socket.socket, upstream: socket.socket, finished: threading.Semaphore) -> None:
        finished.acquire()
        finished.acquire()
        with self._lock:
            for sock in (client, upstream):
                self._sockets.discard(sock)
                sock.close()

    def stop(self) -> None:
        """Shut the listener and every relayed connection: a socket made inside the namespace holds it."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=10)
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()
        time.sleep(0.1)
