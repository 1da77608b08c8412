"""What the live reconcile bench (bench/reconcile_live.py) and its real-apiserver cluster
(bench/live_apiserver.py) share: the names of the objects the reconciler writes, what it must write,
and the reconciler's CPU read from /proc. Here, so neither of the two imports the other for them."""

from __future__ import annotations

import os
from dataclasses import dataclass

BUNDLE = "tls-injector-trust-bundle"
ROLE_LABEL = "tls-injector.io/role"
PROFILE_ANNOTATION = "tls-injector.io/profile"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, order=True)
class Target:
    """An object the reconciler must write: `resource` is "secrets" or "configmaps"; with `needs`, its
    profile annotation must contain that text (a re-issue), else it must only exist."""

    resource: str
    namespace: str
    name: str
    needs: str = ""


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds (10 ms ticks)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK
