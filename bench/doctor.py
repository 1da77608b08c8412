"""`tls-injector doctor` on a large cluster: what one run costs.

    python -m bench.doctor --workloads 1000 --namespaces 100

The cluster is bench.reconcile's, plus the shipped RBAC and webhook configurations, one running pod per
workload as the webhook injects it, a pass of the real `reconcile --once` (child process) to issue every
certificate, and a held Lease. Then the real `doctor -o json` runs in a child process (no
--webhook-address, so the served-certificate check is a warning); API calls are counted by the
emulator, by verb.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import orjson

from bench.reconcile import KINDS, OWN_NS, one_pass, populate
from tests.doctor.cluster import install
from tests.kubeapi import Emulator, running_emulator
from tls_injector.kube import KubeApi, LeaderElector


def pods(emu: Emulator, *, workloads: int, namespaces: int) -> None:
    """One pod per workload, as its controller made it and the webhook injected it."""
    for w in range(workloads):
        ns, name, kind = f"ns{w % namespaces}", f"app{w}", KINDS[w % 3]
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet" if kind == "Deployment" else kind, "uid": "u",
                 "name": f"{name}-5c9d7" if kind == "Deployment" else name, "controller": True}
        labels = {"app": name, "pod-template-hash": "5c9d7"} if kind == "Deployment" else {"app": name}
        if w % namespaces % 10:  # bench.reconcile opts those in by label, the others by namespace
            labels["tls-injector.io/inject"] = "true"
        volumes = [{"name": "tls-injector-cert", "secret": {"secretName": f"{name}-tls"}},
                   {"name": "tls-injector-trust", "configMap": {"name": "tls-injector-trust-bundle"}}]
        emu.add({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{name}-0", "namespace": ns, "labels": labels, "ownerReferences": [owner],
                              "annotations": {"tls-injector.io/injected": "{}"}},
                 "spec": {"volumes": volumes, "containers": [{"name": "app", "image": "example/app:1"}]}})


def doctor(emu: Emulator) -> tuple[float, int, Counter[str], dict[str, Any]]:
    emu.reset_log()
    command = [sys.executable, "-m", "tls_injector", "doctor", "--server", emu.url, "--namespace", OWN_NS, "-o", "json"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    seconds = time.perf_counter() - started
    report: dict[str, Any] = orjson.loads(done.stdout)
    return seconds, done.returncode, Counter(r.verb for r in emu.log), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)
    args = parser.parse_args()
    with running_emulator(seed=0, bookmark_interval=60.0) as emu:
        populate(emu, workloads=args.workloads, namespaces=args.namespaces)
        install(emu)
        pods(emu, workloads=args.workloads, namespaces=args.namespaces)
        one_pass(emu)
        assert LeaderElector(KubeApi(emu.api_client()), OWN_NS, "bench").try_lead(datetime.now(UTC))
        print(f"cluster: {args.workloads} workloads and pods in {args.namespaces} namespaces, reconciled")
        seconds, code, calls, report = doctor(emu)
        flagged = [f"{c['status']}: {c['title']}" for c in report["checks"] if c["status"] != "ok"]
        print(f"doctor: {seconds:.2f} s wall (process start included), exit {code}, {sum(calls.values())} API "
              f"calls {dict(sorted(calls.items()))}, checks {report['summary']}, not ok: {flagged}")


if __name__ == "__main__":
    main()
