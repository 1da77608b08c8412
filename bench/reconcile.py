"""The reconciler at scale: `tls-injector reconcile --once` against the API emulator, twice.

    python -m bench.reconcile --workloads 1000 --namespaces 100

The emulator runs in this process; each pass is the real command in a child process, so its peak RSS
is the reconciler's alone. API calls are counted by the emulator, server side, by verb. The second pass
must write nothing.

Linux keeps ru_maxrss across fork and exec: a child forked straight from this process, which holds the
emulator's whole cluster, would report this process's size (360 MiB at 10,000 workloads, whatever the
reconciler used). So a small Python process sits in between: the reconciler is forked from a few MiB,
and that process reports its child's peak.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from tests.kubeapi import Emulator, running_emulator

OWN_NS = "tls-injector"
KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def populate(emu: Emulator, *, workloads: int, namespaces: int, controller_objects: bool = False) -> None:
    """Namespaces ns0..; workloads spread evenly, kinds in turn; one namespace in ten opted in by label.
    With `controller_objects`, what kube-controller-manager adds on a cluster with no node (as the
    --apiserver runs have it): each Deployment's ReplicaSet and its one Pod, each StatefulSet's Pod, all
    Pending; a DaemonSet has none (no node to run on)."""
    emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OWN_NS}})
    for n in range(namespaces):
        labels = {"tls-injector.io/inject": "enabled"} if n % 10 == 0 else {}
        emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns{n}", "labels": labels}})
    for w in range(workloads):
        ns, name = f"ns{w % namespaces}", f"app{w}"
        pod_labels = {"app": name} if w % namespaces % 10 == 0 else {"app": name, "tls-injector.io/inject": "true"}
        container = {"name": "app", "image": "example/app:1"}
        workload = emu.add({"apiVersion": "apps/v1", "kind": KINDS[w % 3], "metadata": {"name": name, "namespace": ns},
                            "spec": {"selector": {"matchLabels": {"app": name}}, "serviceName": name,
                                     "template": {"metadata": {"labels": pod_labels},
                                                  "spec": {"containers": [container]}}}})
        if controller_objects:
            _controller_objects(emu, workload)


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _controller_objects(emu: Emulator, workload: dict[str, Any]) -> None:
    """A Deployment's ReplicaSet and Pod, a StatefulSet's Pod, as kube-controller-manager makes them."""
    meta, template = workload["metadata"], workload["spec"]["template"]
    ns, name = meta["namespace"], meta["name"]
    spec = {**template["spec"], "serviceAccountName": "default", "serviceAccount": "default",
            "restartPolicy": "Always", "schedulerName": "default-scheduler"}
    if workload["kind"] == "Deployment":
        digest = f"{zlib.crc32(name.encode()):08x}"[:10]
        labels = {**template["metadata"]["labels"], "pod-template-hash": digest}
        owner = emu.add({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "metadata": {"name": f"{name}-{digest}", "namespace": ns, "labels": labels,
                                      "annotations": {"deployment.kubernetes.io/revision": "1"},
                                      "ownerReferences": [_owner(workload)]},
                         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                                  "template": {"metadata": {"labels": labels}, "spec": template["spec"]}}})
        pod_name, generate = f"{owner['metadata']['name']}-{digest[:5]}", f"{owner['metadata']['name']}-"
    elif workload["kind"] == "StatefulSet":
        owner, pod_name, generate = workload, f"{name}-0", f"{name}-"
        labels = {**template["metadata"]["labels"], "controller-revision-hash": f"{name}-7d4b9c8f6d",
                  "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": "0"}
        spec = {**spec, "hostname": pod_name, "subdomain": name}
    else:
        return
    emu.add({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": pod_name, "generateName": generate, "namespace": ns, "labels": labels,
                          "ownerReferences": [_owner(owner)]},
             "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}})


def hostile(emu: Emulator, count: int) -> None:
    """What a tenant that opted nothing in may make (docs/security.md, "The reconciler's memory"): in
    namespace `idle`, `count` valid Services of ~600 KB (a 40,000-label selector) and `count` Deployments
    whose pod templates carry the same 40,000 labels."""
    emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "idle"}})
    labels = {f"k{i}": f"v{i}" for i in range(40_000)}
    for i in range(count):
        emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"big{i}", "namespace": "idle"},
                 "spec": {"selector": labels, "ports": [{"port": 443}]}})
        emu.add({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"big{i}", "namespace": "idle"},
                 "spec": {"selector": {"matchLabels": {"k0": "v0"}},
                          "template": {"metadata": {"labels": labels},
                                       "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}}})


# Runs argv[2:], then writes its peak RSS (KiB) to the file argv[1]; exits with its exit code.
PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[2:]).returncode; "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
            "sys.exit(code)")


def one_pass(emu: Emulator) -> tuple[float, float, int, Counter[str], int, float]:
    """Wall seconds, the reconciler's CPU seconds, exit code, API calls by verb (server side), non-2xx
    answers, the reconciler's peak RSS in MiB."""
    emu.reset_log()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, "-m", "tls_injector", "reconcile", "--once", "--server", emu.url, "--namespace", OWN_NS,
               "--log-level", "warning"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "peak-rss"
        started = time.perf_counter()
        code = subprocess.run([sys.executable, "-S", "-c", PEAK_RSS, str(report), *command], check=False).returncode
        seconds = time.perf_counter() - started
        rss_mib = int(report.read_text()) / 1024
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)  # the small Python's too: ~0.02 s
    log = emu.log
    return seconds, cpu, code, Counter(r.verb for r in log), sum(r.code >= 400 for r in log), rss_mib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--hostile", type=int, default=0,
                        help="also this many ~600 KB Services and Deployments where nothing opted in")
    args = parser.parse_args()
    with running_emulator(seed=0, bookmark_interval=60.0) as emu:
        populate(emu, workloads=args.workloads, namespaces=args.namespaces)
        hostile(emu, args.hostile)
        print(f"cluster: {args.workloads} workloads in {args.namespaces} namespaces, {args.hostile} hostile "
              "Services and Deployments")
        for label in ("first pass", "second pass"):
            seconds, cpu, code, calls, non_2xx, rss_mib = one_pass(emu)
            writes = sum(n for verb, n in calls.items() if verb in ("create", "update", "patch", "delete"))
            print(f"{label}: {seconds:.2f} s wall, {cpu:.2f} s CPU, exit {code}, {sum(calls.values())} API calls "
                  f"{dict(sorted(calls.items()))}, {writes} writes (Events included), {non_2xx} non-2xx answers "
                  f"(404s confirming absence), peak RSS {rss_mib:.0f} MiB")
        secrets = sum(1 for s in emu.objects("secrets")
                      if (s["metadata"].get("labels") or {}).get("tls-injector.io/role") == "leaf")
        bundles = sum(1 for c in emu.objects("configmaps") if c["metadata"]["name"] == "tls-injector-trust-bundle")
        print(f"stored: {secrets} workload certificate Secrets, {bundles} trust bundle ConfigMaps")


if __name__ == "__main__":
    main()
