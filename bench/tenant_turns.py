"""One namespace may not hold the loop: a tenant's `rsa-4096` wave with `force-renew` churn, and new workloads
in another namespace meanwhile, black-box (docs/reconcile.md, "One namespace per turn").

    python -m bench.tenant_turns [--workloads 100] [--probes 5] [--probe-every 3] [--key-algorithm rsa-4096]

The real `tls-injector reconcile` loop as a child process against the API emulator in this process (as
bench/reconcile_live.py), with real key generation (RSA-4096: ~0.3 s of CPU each on this machine kind):
  1. a quiet namespace with one workload converges;
  2. the tenant's namespace gets --workloads Deployments asking for `rsa-4096` (a wave of ~0.3 s each; or
     --key-algorithm),
     and from then on `force-renew` on its Secrets, one after another, every --churn-every seconds;
  3. while that runs, every --probe-every seconds a new workload in the quiet namespace: the time until its
     Secret exists, and the reconciler's calls in that namespace until then (the goal: 2 s, 10 calls);
  4. the churn stops; the time until every tenant Secret holds an RSA-4096 certificate and no force-renew.
Prints each probe and a summary line; every wait is bounded by --timeout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.reconcile_live import EmulatorCluster, running_reconciler
from tests.kubeapi import Emulator, running_emulator
from tests.kubeapi.patches import MERGE_PATCH

OWN_NS, QUIET, TENANT = "tls-injector", "team-b", "tenant-x"
INJECT = {"tls-injector.io/inject": "true"}
KEY_ALGORITHM = "tls-injector.io/key-algorithm"
FORCE = "tls-injector.io/force-renew"
PROFILE = "tls-injector.io/profile"


def _deployment(namespace: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, **INJECT}, "annotations": annotations or {}},
                                  "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}}}


def _secret(emu: Emulator, namespace: str, name: str) -> dict[str, Any] | None:
    found = emu.store.find(emu.resource("secrets"), namespace, name)
    return None if found is None else found.obj  # type: ignore[no-any-return]


def _wait(condition: Callable[[], bool], timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def _churn(emu: Emulator, workloads: int, every: float, stop: threading.Event, count: list[int]) -> None:
    """The tenant: force-renew on its Secrets, one after another (straight into the store, as a write)."""
    secrets = emu.resource("secrets")
    turn = 0
    while not stop.wait(every):
        name = f"w{turn % workloads}-tls"
        turn += 1
        if _secret(emu, TENANT, name) is None:
            continue
        body = {"metadata": {"annotations": {FORCE: str(turn)}}}
        emu.store.patch(secrets, TENANT, name, content_type=MERGE_PATCH, body=body)
        count[0] += 1


def _tenant_converged(emu: Emulator, workloads: int, algorithm: str) -> bool:
    for n in range(workloads):
        secret = _secret(emu, TENANT, f"w{n}-tls")
        annotations = (secret or {}).get("metadata", {}).get("annotations") or {}
        if secret is None or FORCE in annotations or f"key-algorithm={algorithm}," not in annotations.get(PROFILE, ""):
            return False
    return True


def _probe(emu: Emulator, n: int, timeout: float) -> tuple[float | None, int]:
    seen = len(emu.faults.log)
    emu.add(_deployment(QUIET, f"probe{n}"))
    took = _wait(lambda: _secret(emu, QUIET, f"probe{n}-tls") is not None, timeout)
    _wait(lambda: any(r.namespace == QUIET and r.resource == "events" for r in emu.faults.log[seen:]), 5.0)
    return took, sum(r.namespace == QUIET for r in emu.faults.log[seen:])


def run(args: argparse.Namespace, folder: Path) -> int:
    """The phases; 0 when every probe had its Secret and the tenant converged within --timeout."""
    with running_emulator(seed=0, bookmark_interval=60.0) as emu:
        for ns in (OWN_NS, QUIET, TENANT):
            emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        emu.add(_deployment(QUIET, "web"))
        with running_reconciler(EmulatorCluster(emu), folder, resync=None) as reconciler:
            if _wait(lambda: _secret(emu, QUIET, "web-tls") is not None, args.timeout) is None:
                print("the quiet namespace never converged:\n" + reconciler.tail(), file=sys.stderr)
                return 1
            cpu0, started = reconciler.cpu, time.monotonic()
            for n in range(args.workloads):
                emu.add(_deployment(TENANT, f"w{n}", {KEY_ALGORITHM: args.key_algorithm}))
            stop, churned = threading.Event(), [0]
            churn = threading.Thread(target=_churn, args=(emu, args.workloads, args.churn_every, stop, churned),
                                     daemon=True)
            churn.start()
            results = []
            for n in range(args.probes):
                time.sleep(args.probe_every)
                took, calls = _probe(emu, n, args.timeout)
                results.append((took, calls))
                shown = "timed out" if took is None else f"{took:.2f} s"
                print(f"probe {n} at {time.monotonic() - started:5.1f} s into the wave: {shown}, {calls} calls")
            stop.set()
            churn.join()
            stopped = time.monotonic()
            converged = _wait(lambda: _tenant_converged(emu, args.workloads, args.key_algorithm), args.timeout)
            cpu = reconciler.cpu - cpu0
    times = [t for t, _ in results if t is not None]
    print(f"tenant: {args.workloads} {args.key_algorithm} workloads, {churned[0]} force-renews during "
          f"{stopped - started:.1f} s; converged {'-' if converged is None else f'{converged:.1f} s'} after the "
          f"churn stopped; reconciler CPU {cpu:.1f} s")
    print(f"new workload elsewhere: median {statistics.median(times) if times else float('nan'):.2f} s, "
          f"max {max(times) if times else float('nan'):.2f} s, max {max(c for _, c in results)} calls "
          f"({len(times)} of {len(results)} within --timeout)")
    return 0 if converged is not None and len(times) == len(results) else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=100, help="the tenant's workloads")
    parser.add_argument("--key-algorithm", default="rsa-4096", help="what the tenant's workloads ask for")
    parser.add_argument("--probes", type=int, default=5, help="new workloads in the quiet namespace")
    parser.add_argument("--probe-every", type=float, default=3.0, help="seconds between them")
    parser.add_argument("--churn-every", type=float, default=0.05, help="seconds between the tenant's force-renews")
    parser.add_argument("--timeout", type=float, default=600.0, help="the longest wait, seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="tenant-turns-") as tmp:
        sys.exit(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
