"""Issue 24, finding 5, and issue 42: changes anywhere, however often, do not make the reconciler list the
whole cluster, nor decide on all of it, every second. The real loop (cache, queue, passes) against the
API emulator."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, reconciler, small_cluster
from tls_injector.kube import DEPLOYMENTS, SECRETS, KubeApi, Resource
from tls_injector.reconcile.core.budget import NAMESPACE_TURN_SECONDS
from tls_injector.reconcile.loop.controller import MIN_PASS_GAP_SECONDS, Controller


def _churn(api: KubeApi, resource: Resource, name: str, namespace: str, change: Callable[[dict[str, Any], int], None],
           *, seconds: float = 8.0) -> float:
    """An object changed every 0.1 s for `seconds`; returns how long it took."""
    started = time.monotonic()
    for i in range(int(seconds * 10)):
        obj = api.get(resource, name, namespace=namespace)
        change(obj, i)
        api.replace(resource, obj)
        time.sleep(0.1)
    return time.monotonic() - started


def _running(kubeapi: Emulator) -> tuple[Controller, threading.Event, threading.Thread]:
    small_cluster(kubeapi, namespaces=2, per_namespace=1)
    rec = reconciler(kubeapi, Clock(), turn_seconds=NAMESPACE_TURN_SECONDS)  # as the loop's command builds them
    loop = Controller(rec.api, rec, None, resync_seconds=3600, debounce_seconds=0.05, watch_timeout_seconds=5)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while loop.passes == 0 or kubeapi.get("secrets", "app0-tls", "ns1") is None:  # the last of small_cluster's
        assert time.monotonic() < deadline, "the loop's first pass did not end"
        time.sleep(0.05)
    time.sleep(1)  # the first pass's own writes come back through the watches
    return loop, stop, thread


def test_a_tenants_change_every_tenth_of_a_second_costs_a_keyed_pass_of_its_namespace_and_no_list(
        kubeapi: Emulator) -> None:
    """Before the cache, every change woke a full pass that listed the whole cluster, one per 5 s floor.
    Now a tenant's churn in its own namespace costs keyed passes of that namespace alone: no list call,
    no full pass, nothing written elsewhere; and its last change is still converged."""
    loop, stop, thread = _running(kubeapi)
    try:
        passes = loop.passes
        kubeapi.reset_log()
        api = KubeApi(kubeapi.api_client())

        def annotate(obj: dict[str, Any], i: int) -> None:  # what the cache keeps: each one is a change
            obj["spec"]["template"]["metadata"].setdefault("annotations", {})["tls-injector.io/duration"] = \
                f"{720 + i % 2}h"

        _churn(api, DEPLOYMENTS, "app0", "ns0", annotate)
        time.sleep(2)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert loop.passes == passes, "no full pass for a namespace's change"
    assert kubeapi.calls("list") == 0, "no list: the cache answers"
    assert loop.keyed_passes >= 2
    written = {(r.verb, r.namespace) for r in kubeapi.writes() if r.resource != "events"}
    assert written <= {("update", "ns0")}, written  # the Secret re-issued for the new duration, in ns0 alone
    secret = kubeapi.get("secrets", "app0-tls", "ns0")
    assert secret is not None


def test_a_change_only_a_full_pass_decides_on_costs_one_per_floor_not_one_per_change(kubeapi: Emulator) -> None:
    """Our CA's Secret concerns every namespace: its changes call a full pass (from the cache), at most one
    per 5 s floor, never one per change, and the last change is not lost."""
    loop, stop, thread = _running(kubeapi)
    try:
        passes, lists = loop.passes, kubeapi.calls("list")
        api = KubeApi(kubeapi.api_client())

        def label(obj: dict[str, Any], i: int) -> None:
            obj["metadata"].setdefault("labels", {})["churn"] = str(i)

        started = time.monotonic()
        _churn(api, SECRETS, "tls-injector-ca", OWN_NS, label)
        time.sleep(6)  # the last change is still picked up, after the floor
        window = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=10)
    # One full pass per 5 s floor at most, never one per change (80 changes).
    assert 1 <= loop.passes - passes <= 1 + window // MIN_PASS_GAP_SECONDS, (loop.passes - passes, window)
    assert kubeapi.calls("list") == lists
