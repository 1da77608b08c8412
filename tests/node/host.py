"""What the node tier must leave as it found on the host: a snapshot to take before and compare after.

The node's processes run in namespaces of their own (tests/node/namespace.py); this is the proof
that none of it leaked: the kernel settings a kubelet or kube-proxy would write (the three the kubelet
checks, forwarding, conntrack sizes, bridge netfilter), the host's firewall rules, links, addresses,
routes and named network namespaces, and the paths a kubelet, containerd or the CNI plugins write by
default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYSCTLS = (
    "vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "vm/panic_on_oom",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait", "net/netfilter/nf_conntrack_tcp_be_liberal",
)
# Where a kubelet, containerd, runc and the CNI plugins write when not told otherwise.
DEFAULT_PATHS = ("/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni", "/etc/cni", "/opt/cni",
                 "/opt/containerd", "/run/containerd",
                 "/var/log/pods", "/var/log/containers", "/run/nri", "/etc/kubernetes")
_COUNTERS = re.compile(r"\[\d+:\d+\]")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "<absent>"


def _rules(tool: str) -> str:
    """A table dump without counters or the dump's own time comments."""
    binary = shutil.which(tool)
    if binary is None:
        return "<not installed>"
    done = subprocess.run([binary], capture_output=True, text=True, timeout=60, check=False)
    lines = [_COUNTERS.sub("", line) for line in (done.stdout + done.stderr).splitlines()
             if not line.startswith("#")]
    return "\n".join(lines)


def _ip(*argv: str) -> str:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.strip()


@dataclass(frozen=True)
class HostState:
    sysctls: dict[str, str]
    rules: dict[str, str]
    network: dict[str, str]
    paths: dict[str, bool]
    nsfs_mounts: tuple[str, ...]

    @staticmethod
    def take() -> HostState:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        return HostState(
            sysctls={name: _read(Path("/proc/sys") / name) for name in SYSCTLS},
            rules={tool: _rules(tool) for tool in ("iptables-save", "ip6tables-save", "iptables-legacy-save",
                                                   "ip6tables-legacy-save")},
            network={"links": _ip("-o", "link", "show"), "addresses": _ip("-o", "addr", "show"),
                     "routes": _ip("route", "show", "table", "all"), "netns": _ip("netns", "list")},
            paths={path: os.path.lexists(path) for path in DEFAULT_PATHS},
            nsfs_mounts=tuple(sorted(line.split()[4] for line in mounts if " - nsfs " in line)),
        )

    def differences(self, after: HostState) -> list[str]:
        found = []
        for field in ("sysctls", "rules", "network", "paths"):
            before_map, after_map = getattr(self, field), getattr(after, field)
            for key in sorted(set(before_map) | set(after_map)):
                if before_map.get(key) != after_map.get(key):
                    found.append(f"{field} {key}: before {before_map.get(key)!r}, after {after_map.get(key)!r}")
        if self.nsfs_mounts != after.nsfs_mounts:
            found.append(f"namespace mounts: before {self.nsfs_mounts}, after {after.nsfs_mounts}")
        return found
