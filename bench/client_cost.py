"""Our own CPU per write on the real kube-apiserver: the reconciler's client (tls_injector.kube.KubeApi) creating
Secrets shaped as its leaves, CPU of the calling thread only (the apiserver and etcd are other processes).

    python -m bench.client_cost [--creates 200] [--rounds 5] [--profile out.prof]

Each round creates --creates Secrets with each variant in turn (A then B, B then A on the next round), so
both meet the same load from whoever else shares the machine; the figure of a variant is its median round,
and the ratio is taken round by round. A variant is a way of making the same call:

  answer-decoded   KubeApi.create: the answer (the object as stored, managedFields included) parsed whole
  answer-skipped   KubeApi.post: the answer's status checked, its body read and dropped unparsed (an Event's)
  new-connection   as answer-decoded, the pool emptied first: what each call would cost without keep-alive

The cluster is the cluster tier's control plane (tests/cluster/controlplane.py), binaries from the cache.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import os
import resource
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.cluster.controlplane import ControlPlane, api_client
from tls_injector.kube import NAMESPACES, SECRETS, KubeApi

# A leaf Secret's sizes as the reconciler writes them (P-256): a leaf and its CA's PEM, the key, the bundle.
CERT_BYTES, KEY_BYTES, CA_BYTES = 1400, 240, 700
NAMESPACE = "client-cost"


def leaf_body(name: str) -> dict[str, object]:
    def b64(size: int) -> str:
        return base64.b64encode(os.urandom(size * 3 // 4)).decode()

    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "tls-injector", "tls-injector.io/role": "leaf"},
                         "annotations": {"tls-injector.io/issuer": "0123456789abcdef",
                                         "tls-injector.io/profile": "duration=2160h,renew-before=840h,key=ecdsa-p256"}},
            "data": {"tls.crt": b64(CERT_BYTES), "tls.key": b64(KEY_BYTES), "ca.crt": b64(CA_BYTES)}}


def variants(api: KubeApi) -> dict[str, Callable[[dict[str, object]], object]]:
    def fresh(body: dict[str, object]) -> object:
        api.api_client.rest_client.pool_manager.clear()
        return api.create(SECRETS, body, namespace=NAMESPACE)

    found: dict[str, Callable[[dict[str, object]], object]] = {
        "answer-decoded": lambda body: api.create(SECRETS, body, namespace=NAMESPACE),
        "new-connection": fresh,
    }
    found["answer-skipped"] = lambda body: api.post(SECRETS, body, namespace=NAMESPACE)
    return found


def one_round(make: Callable[[dict[str, object]], object], label: str, creates: int, serial: list[int],
              system: list[float]) -> float:
    """Microseconds of this thread's CPU per create (the bodies are made outside the measure); appends to
    `system` the share of it spent in the kernel (the sockets: TCP over loopback, reads and writes)."""
    bodies = []
    for _ in range(creates):
        serial[0] += 1
        bodies.append(leaf_body(f"{label}-{serial[0]}"))
    before = resource.getrusage(resource.RUSAGE_THREAD)
    for body in bodies:
        make(body)
    after = resource.getrusage(resource.RUSAGE_THREAD)
    user, kernel = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    system.append(kernel / (user + kernel) if user + kernel else 0.0)
    return (user + kernel) / creates * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="variants to measure (default: all)")
    parser.add_argument("--profile", type=Path, help="cProfile the rounds of the first variant into this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="client-cost-") as tmp:
        plane = ControlPlane(Path(tmp)).start()
        try:
            api = KubeApi(api_client(plane.admin_kubeconfig))
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            chosen = {k: v for k, v in variants(api).items() if not args.only or k in args.only}
            serial = [0]
            kernel: dict[str, list[float]] = {label: [] for label in chosen}
            for label, make in chosen.items():  # warm: connections, the apiserver's caches
                one_round(make, label, 20, serial, [])
            rounds: dict[str, list[float]] = {label: [] for label in chosen}
            profiler = cProfile.Profile() if args.profile else None
            for number in range(args.rounds):
                order = list(chosen.items())
                for label, make in order if number % 2 == 0 else reversed(order):
                    profiled = profiler if label == order[0][0] else None
                    if profiled is not None:
                        profiled.enable()
                    rounds[label].append(one_round(make, label, args.creates, serial, kernel[label]))
                    if profiled is not None:
                        profiled.disable()
            if profiler is not None:
                profiler.dump_stats(str(args.profile))
        finally:
            plane.stop()
    first = next(iter(rounds))
    print(f"| variant | us of our CPU per create (median of {args.rounds} rounds of {args.creates}) | of it in "
          f"the kernel | rounds | ratio to {first} (median of per-round ratios) |")
    print("| --- | --- | --- | --- | --- |")
    for label, figures in rounds.items():
        ratios = [f / b for f, b in zip(figures, rounds[first], strict=True)]
        print(f"| {label} | {statistics.median(figures):.0f} | {statistics.median(kernel[label]):.0%} | "
              f"{', '.join(f'{f:.0f}' for f in figures)} | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
