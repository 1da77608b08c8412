"""The test API server emulator under the load of a 1,000-workload cluster, through the official client.

    python -m bench.kubeapi [--namespaces 100] [--per-namespace 10] [--extra 10000]

The emulator runs as its own process (``python -m tests.kubeapi``), as it would for a benchmark of the
CLI, so its CPU is measured apart from the client's: per phase, the wall time and requests per second
seen by the official client, and the emulator's CPU per request (user + system, from /proc, 10 ms
ticks: phases are sized so that this is well above the resolution). Then whether a get's cost stays flat
after ``--extra`` more Secrets are stored, and the emulator's peak RSS.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import kubernetes.client as k8s

_TICK = os.sysconf("SC_CLK_TCK")


def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name, "tls-injector.io/inject": "true"}
    container = {"name": "app", "image": "registry.example/app:1", "ports": [{"containerPort": 8443}],
                 "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(5)]}
    return {"metadata": {"name": name, "labels": labels, "annotations": {"tls-injector.io/service-names": name}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}


def secret(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"tls-injector.io/owned": "true"}}, "type": "kubernetes.io/tls",
            "data": {key: base64.b64encode(b"x" * size).decode()  # sizes of a P-256 chain, key and bundle
                     for key, size in (("tls.crt", 1400), ("tls.key", 240), ("ca.crt", 700))}}


@contextmanager
def emulator_process() -> Iterator[tuple[str, int]]:
    with subprocess.Popen([sys.executable, "-m", "tests.kubeapi", "--seed", "0"], stdout=subprocess.PIPE,
                          text=True) as proc:
        try:
            assert proc.stdout is not None
            yield proc.stdout.readline().strip(), proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def peak_rss_mib(pid: int) -> float:
    return status_mib(pid, "VmHWM")


def status_mib(pid: int, field: str) -> float:
    """A size of /proc/<pid>/status (VmHWM, VmRSS, ...), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def timed(pid: int, label: str, count: int, action: Callable[[], object]) -> float:
    cpu, start = cpu_seconds(pid), time.perf_counter()
    action()
    elapsed, server = time.perf_counter() - start, cpu_seconds(pid) - cpu
    print(f"{label:<44} {count:>6} req {elapsed:>7.2f} s {count / elapsed:>7.0f} req/s  "
          f"emulator CPU {server / count * 1e6:>5.0f} us/req")
    return elapsed / count


def populate(pid: int, client: k8s.ApiClient, namespaces: list[str], per_ns: int) -> None:
    core, apps = k8s.CoreV1Api(client), k8s.AppsV1Api(client)
    pairs = [(ns, i) for ns in namespaces for i in range(per_ns)]
    timed(pid, "create namespaces", len(namespaces),
          lambda: [core.create_namespace({"metadata": {"name": ns}}) for ns in namespaces])
    timed(pid, "create deployments", len(pairs),
          lambda: [apps.create_namespaced_deployment(ns, deployment(f"web-{i}")) for ns, i in pairs])
    timed(pid, "create tls secrets", len(pairs),
          lambda: [core.create_namespaced_secret(ns, secret(f"web-{i}-tls")) for ns, i in pairs])
    timed(pid, "list deployments, all namespaces, selector", 10,
          lambda: [apps.list_deployment_for_all_namespaces(label_selector="tls-injector.io/inject=true")
                   for _ in range(10)])
    timed(pid, "list secrets per namespace, selector", len(namespaces),
          lambda: [core.list_namespaced_secret(ns, label_selector="tls-injector.io/owned=true") for ns in namespaces])
    timed(pid, "get secret", len(pairs), lambda: [core.read_namespaced_secret(f"web-{i}-tls", ns) for ns, i in pairs])
    timed(pid, "strategic patch deployment annotation", len(pairs), lambda: [
        apps.patch_namespaced_deployment(f"web-{i}", ns, {"metadata": {"annotations": {"x": "1"}}}) for ns, i in pairs])
    secrets = [core.read_namespaced_secret(f"web-{i}-tls", ns) for ns, i in pairs]
    timed(pid, "replace secret with resourceVersion", len(secrets), lambda: [
        core.replace_namespaced_secret(s.metadata.name, s.metadata.namespace, s) for s in secrets])


def add(url: str, items: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(f"{url}/_emulator/add", data=json.dumps({"items": items}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--per-namespace", type=int, default=10)
    parser.add_argument("--extra", type=int, default=10_000, help="secrets added for the flat-cost check")
    args = parser.parse_args()
    namespaces = [f"ns-{i}" for i in range(args.namespaces)]
    with emulator_process() as (url, pid), k8s.ApiClient(k8s.Configuration(host=url)) as client:
        populate(pid, client, namespaces, args.per_namespace)
        core = k8s.CoreV1Api(client)
        get = lambda: [core.read_namespaced_secret("web-0-tls", "ns-0") for _ in range(1000)]  # noqa: E731
        timed(pid, "get one secret, before extra", 1000, get)
        add(url, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "filler"}}])
        add(url, [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s-{i}", "namespace": "filler"},
                   "data": {"k": "dg=="}} for i in range(args.extra)])
        timed(pid, f"get one secret, after {args.extra} more secrets", 1000, get)
        print(f"emulator peak RSS {peak_rss_mib(pid):.0f} MiB")


if __name__ == "__main__":
    main()
