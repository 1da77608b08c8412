"""Where the long-running reconciler's resident memory goes: its cache and full passes in this process,
against the API emulator in a child process (so the emulator's own objects are not counted), with the
resident size (VmRSS, VmHWM) after each step and, with --trace, Python's own heap beside it; and the
step's CPU (this process's, all its threads: the passes' decisions, the writers, the client's decoding;
the emulator's is the child's and is not counted). A pass after the first writes nothing: its CPU is a
resync's full pass from the cache.

    python -m bench.reconcile_memory --workloads 20000 [--passes 3] [--trace] [--top 25]

Steps: the modules imported; the cache listed (its informers' relists: workloads, the controller's
ReplicaSets and pods, namespaces, Services; no leaf Secret yet); then each full pass (the first issues
every leaf Secret, which the cache then holds as our writes answered). The cluster is bench/reconcile.py's
(`populate`, namespaces of ten, the controller's objects on). What the resident size holds beyond the
traced heap is the interpreter's own and the C libraries', and what Python's and glibc's allocators keep
mapped between objects; --trace (PYTHONTRACEMALLOC, set for a child run of this module) slows the passes
about threefold and lists the lines whose allocations are alive at the end.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.kubeapi import status_mib

ROOT = Path(__file__).resolve().parent.parent


def resident() -> dict[str, float]:
    """VmRSS and VmHWM of this process, MiB."""
    return {key: status_mib(os.getpid(), key) for key in ("VmRSS", "VmHWM")}


def serve(workloads: int) -> None:
    """The child: the emulator, populated; its address on stdout; serves until killed."""
    from bench.reconcile import populate
    from tests.kubeapi import running_emulator

    with running_emulator() as emu:
        populate(emu, workloads=workloads, namespaces=max(1, workloads // 10), controller_objects=True)
        print(emu.url, flush=True)
        while True:
            time.sleep(3600)


def measure(url: str, passes: int) -> list[tuple[str, dict[str, float], float | None, float]]:
    """(step, resident sizes, traced heap MiB or None, this process's CPU seconds in it) after each step."""
    import kubernetes.client

    from tls_injector.kube import KubeApi
    from tls_injector.reconcile.ca.machine import CaPolicy
    from tls_injector.reconcile.loop.cache import ClusterCache
    from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

    started = [time.process_time()]

    def step(name: str) -> tuple[str, dict[str, float], float | None, float]:
        cpu = time.process_time() - started[0]
        gc.collect()  # the measure's own collection is no step's
        traced = tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else None
        sizes = resident()
        started[0] = time.process_time()
        return name, sizes, traced, cpu

    config = kubernetes.client.Configuration()
    config.host = url
    api = KubeApi(kubernetes.client.ApiClient(config))
    steps = [step("imported")]
    cache = ClusterCache(api, on_key=lambda _: None)
    for informer in cache.informers:
        informer.relist()
    steps.append(step("cache listed"))
    reconciler = Reconciler(api, ReconcileSettings(namespace="tls-injector", ca=CaPolicy()))
    reconciler.attach(cache)
    for n in range(1, passes + 1):
        report = reconciler.run_pass()
        if report.failed or report.aborted:
            raise RuntimeError(f"pass {n}: {report.aborted or report.failed[:3]}")
        steps.append(step(f"pass {n}"))
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=20_000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--trace", action="store_true", help="Python's heap too (PYTHONTRACEMALLOC: ~3x slower)")
    parser.add_argument("--top", type=int, default=25, help="with --trace: the lines holding the most at the end")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the emulator's child
    args = parser.parse_args()
    if args.serve:
        serve(args.workloads)
        return
    if args.trace and not tracemalloc.is_tracing():  # traced from the interpreter's start, imports included
        argv = [sys.executable, "-m", "bench.reconcile_memory", *sys.argv[1:]]
        sys.exit(subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONTRACEMALLOC": "1"}, check=False).returncode)
    child = subprocess.Popen([sys.executable, "-m", "bench.reconcile_memory", "--serve", "--workloads",
                              str(args.workloads)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={k: v for k, v in os.environ.items() if k != "PYTHONTRACEMALLOC"})
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url:
            raise SystemExit(f"the emulator did not start (exit {child.wait()})")
        steps = measure(url, args.passes)
    finally:
        child.kill()
        child.wait()
    print(f"{args.workloads} workloads in {max(1, args.workloads // 10)} namespaces, the controller's objects")
    print("| step | VmRSS MiB | VmHWM MiB | Python heap MiB (traced) | CPU s |\n| --- | --- | --- | --- | --- |")
    for name, sizes, traced, cpu in steps:
        print(f"| {name} | {sizes['VmRSS']:.1f} | {sizes['VmHWM']:.1f} | "
              f"{'' if traced is None else f'{traced:.1f}'} | {cpu:.2f} |")
    if tracemalloc.is_tracing():
        print(f"\nthe {args.top} lines holding the most at the end:")
        stats: list[Any] = tracemalloc.take_snapshot().statistics("lineno")
        for stat in stats[:args.top]:
            print(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d}  {stat.traceback}")


if __name__ == "__main__":
    main()
