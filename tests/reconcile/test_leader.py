"""Leader election through a Lease, and the loop that watches and reconciles."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, START, Clock, namespace, reconciler, small_cluster
from tls_injector.kube import CRON_JOBS, DEPLOYMENTS, PODS, KubeApi, LeaderElector
from tls_injector.kube.api import LEASES, WatchEvent
from tls_injector.kube.lease import lease_step
from tls_injector.reconcile.core.budget import NAMESPACE_TURN_SECONDS
from tls_injector.reconcile.core.events import ISSUED_WINDOW
from tls_injector.reconcile.loop.cache import ClusterCache
from tls_injector.reconcile.loop.controller import Controller


@pytest.mark.parametrize(
    ("holder", "unchanged_for", "step"),
    [
        ("me", 0, "renew"),
        ("me", 60, "renew"),
        ("", 0, "take"),
        ("other", 14, "wait"),
        ("other", 15, "take"),
    ],
)
def test_a_lease_is_renewed_when_ours_taken_when_free_or_stale_else_waited_for(
    holder: str, unchanged_for: int, step: str
) -> None:
    spec = {"holderIdentity": holder} if holder else {}
    assert lease_step(spec, identity="me", unchanged_for=timedelta(seconds=unchanged_for),
                      duration=timedelta(seconds=15)) == step


def test_one_replica_leads_and_another_takes_over_only_after_the_leader_stops_renewing(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    a = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "a")
    b = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "b")
    assert a.try_lead(START)
    assert not b.try_lead(START)
    for seconds in (2, 4, 6):  # a renews, b keeps seeing a fresh record
        assert a.try_lead(START + timedelta(seconds=seconds))
        assert not b.try_lead(START + timedelta(seconds=seconds))
    assert not b.try_lead(START + timedelta(seconds=20))  # a went silent at 6 s; b last saw a change at 6 s
    assert not a.is_leader(START + timedelta(seconds=17))  # a stops writing 10 s after its last renewal
    assert b.try_lead(START + timedelta(seconds=21))  # 15 s without a change: b takes over
    assert not a.try_lead(START + timedelta(seconds=22))
    lease = kubeapi.get("leases", "tls-injector-leader", OWN_NS)
    assert lease is not None
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)


class Rounds:
    """Stands in for Controller._lead's stop event: each wait is one lease round, after which the shared
    clock moves by the next step's seconds and its action (another replica's round) runs; set once every
    step is taken."""

    def __init__(self, clock: Clock, steps: list[tuple[int, Callable[[], object] | None]]) -> None:
        self.clock, self.steps = clock, steps

    def is_set(self) -> bool:
        return not self.steps

    def wait(self, seconds: float) -> bool:
        step, action = self.steps.pop(0)
        self.clock.advance(timedelta(seconds=step))
        if action is not None:
            action()
        return False


def lease_log(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, object]]:
    return [(r.levelname, r.getMessage(), getattr(r, "leading_again", None)) for r in caplog.records
            if r.name == "tls_injector.controller"]


def test_the_lease_thread_says_when_it_takes_the_lease_and_when_it_lapsed_even_if_taken_back_at_once(
        kubeapi: Emulator, caplog: pytest.LogCaptureFixture) -> None:
    """A renewal that comes after the renew deadline (the thread starved, the API server slow) is taken back
    in the same round, but the passes stopped writing meanwhile and dropped what they held: the log says
    so, with how long the Lease went unrenewed, rather than nothing at all."""
    namespace(kubeapi, OWN_NS)
    clock = Clock()
    elector = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "a")
    loop = Controller(elector.api, reconciler(kubeapi, clock), elector, clock=clock)
    with caplog.at_level(logging.INFO, logger="tls_injector.controller"):
        loop._lead(elector, Rounds(clock, [(2, None), (2, None), (12, None), (2, None)]))  # type: ignore[arg-type]
    assert lease_log(caplog) == [("INFO", "leader lease taken", None), ("WARNING", "leader lease lost", True)]
    (lost,) = [r for r in caplog.records if r.getMessage() == "leader lease lost"]
    assert lost.since_renewal_seconds == 12.0  # type: ignore[attr-defined]
    assert elector.is_leader(clock())


def test_the_lease_thread_says_when_another_replica_took_the_lease(kubeapi: Emulator,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    namespace(kubeapi, OWN_NS)
    clock = Clock()
    a = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "a")
    b = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "b")
    loop = Controller(a.api, reconciler(kubeapi, clock), a, clock=clock)

    def silent_for_16_seconds() -> None:  # a's thread starved: b sees the same Lease for 16 s and takes it
        assert not b.try_lead(clock())
        clock.advance(timedelta(seconds=16))
        assert b.try_lead(clock())

    with caplog.at_level(logging.INFO, logger="tls_injector.controller"):
        loop._lead(a, Rounds(clock, [(0, silent_for_16_seconds), (2, None)]))  # type: ignore[arg-type]
    # a leads from its first round; its next round finds the Lease lost, and b's.
    assert lease_log(caplog) == [("INFO", "leader lease taken", None), ("WARNING", "leader lease lost", False)]
    assert not a.is_leader(clock())
    assert b.is_leader(clock())


def test_a_leader_renews_on_its_own_last_write_without_reading_the_lease(kubeapi: Emulator) -> None:
    """One call a round, not two: the renewal carries the version the last one left (client-go's fast path)."""
    namespace(kubeapi, OWN_NS)
    a = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "a")
    assert a.try_lead(START)
    kubeapi.reset_log()
    for seconds in (2, 4, 6):
        assert a.try_lead(START + timedelta(seconds=seconds))
    assert (kubeapi.calls("get", "leases"), kubeapi.calls("update", "leases")) == (0, 3)
    lease = kubeapi.get("leases", "tls-injector-leader", OWN_NS)
    assert lease is not None
    assert lease["spec"]["renewTime"].startswith((START + timedelta(seconds=6)).strftime("%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize("change", ["taken", "deleted"])
def test_a_leader_whose_lease_changed_under_it_reads_it_and_decides_in_the_same_round(kubeapi: Emulator,
                                                                                    change: str) -> None:
    """Someone else wrote the Lease (a replica that took it) or deleted it: the renewal on our last write
    is refused (409, 404), and the round reads the Lease and decides as any replica would."""
    namespace(kubeapi, OWN_NS)
    api = KubeApi(kubeapi.api_client())
    a = LeaderElector(api, OWN_NS, "a")
    assert a.try_lead(START)
    lease = kubeapi.get("leases", "tls-injector-leader", OWN_NS)
    assert lease is not None
    if change == "taken":
        api.replace(LEASES, {**lease, "spec": {**lease["spec"], "holderIdentity": "b"}})
    else:
        api.delete(LEASES, "tls-injector-leader", namespace=OWN_NS)
    kubeapi.reset_log()
    assert a.try_lead(START + timedelta(seconds=2)) is (change == "deleted")
    assert kubeapi.calls("get", "leases") == 1
    stored = kubeapi.get("leases", "tls-injector-leader", OWN_NS)
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == ("a" if change == "deleted" else "b")
    assert a.is_leader(START + timedelta(seconds=2)) is (change == "deleted")


def test_a_replica_that_is_not_leader_writes_nothing(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    clock = Clock()
    elector = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "follower")
    report = reconciler(kubeapi, clock, may_write=lambda: elector.is_leader(clock())).run_pass()
    assert "NotLeader" in report.aborted
    assert kubeapi.writes() == []


def test_the_loop_reacts_to_a_new_workload_through_its_watch(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    with running_loop(kubeapi, watch_timeout_seconds=5):
        _wait_for(lambda: kubeapi.get("secrets", "app0-tls", "ns0") is not None)
        workload = KubeApi(kubeapi.api_client()).get(DEPLOYMENTS, "app0", namespace="ns0")
        workload["metadata"] = {"name": "late", "namespace": "ns0"}
        KubeApi(kubeapi.api_client()).create(DEPLOYMENTS, workload, namespace="ns0")
        _wait_for(lambda: kubeapi.get("secrets", "late-tls", "ns0") is not None)


def test_the_loop_wakes_for_a_bare_unlabelled_pod_in_an_opted_in_namespace_and_for_a_cronjob(
    kubeapi: Emulator
) -> None:
    """Only the watches can announce these (the resync is an hour away)."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    namespace(kubeapi, "shop", enabled=True)
    api = KubeApi(kubeapi.api_client())
    containers = [{"name": "app", "image": "example/app:1"}]
    with running_loop(kubeapi, watch_timeout_seconds=30):
        _wait_for(lambda: kubeapi.get("secrets", "app0-tls", "ns0") is not None)
        _wait_for(lambda: kubeapi.open_watches("pods") > 0 and kubeapi.open_watches("cronjobs") > 0)
        api.create(PODS, {"metadata": {"generateName": "dbg-"}, "spec": {"containers": containers}}, namespace="shop")
        api.create(CRON_JOBS, {"metadata": {"name": "nightly"}, "spec": {"schedule": "0 3 * * *", "jobTemplate": {
            "spec": {"template": {"spec": {"containers": containers}}}}}}, namespace="shop")
        _wait_for(lambda: kubeapi.get("secrets", "dbg-tls", "shop") is not None)
        _wait_for(lambda: kubeapi.get("secrets", "nightly-tls", "shop") is not None)


def test_a_watch_starts_from_one_small_page_however_many_pods_the_cluster_has(kubeapi: Emulator) -> None:
    """Pods are watched without a selector; reading every pod of the cluster to start would cost a
    large cluster dozens of pages at each start and after each 410."""
    namespace(kubeapi, "busy")
    for n in range(1200):  # more than two pages of 500
        kubeapi.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{n}", "namespace": "busy"},
                     "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}})
    api = KubeApi(kubeapi.api_client())
    version = api.current_version(PODS)
    assert kubeapi.calls("list", "pods") == 1
    api.create(PODS, {"metadata": {"name": "late"}, "spec": {"containers": [{"name": "c", "image": "c"}]}},
               namespace="busy")
    [event] = [e for e in api.watch(PODS, resource_version=version, timeout_seconds=1) if e.type != "BOOKMARK"]
    assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "late")


def pod_event(owner_kind: str | None, api_version: str = "apps/v1", inject: str | None = None) -> dict[str, object]:
    owners = [{"apiVersion": api_version, "kind": owner_kind, "name": "o", "controller": True}] if owner_kind else []
    labels = {"tls-injector.io/inject": inject} if inject else {}
    return {"metadata": {"name": "p", "namespace": "busy", "labels": labels, "ownerReferences": owners}}


@pytest.mark.parametrize(("pod", "wakes"), [
    (pod_event(None), True),
    (pod_event("Cluster", "postgres.example.com/v1"), True),
    (pod_event("Job", "example.com/v1"), True),
    (pod_event(None, inject="false"), False),
    (pod_event("ReplicaSet"), False),
    (pod_event("StatefulSet", inject="true"), False),
    (pod_event("Job", "batch/v1"), False),
    ({"metadata": "not a map"}, False),
])
def test_only_pod_events_of_pods_that_need_their_own_secret_wake_the_loop(kubeapi: Emulator, pod: dict[str, object],
                                                                          wakes: bool) -> None:
    """A cluster's pods change all the time; those of listed kinds are covered by their templates and
    must not cost a pass each (in an enabled namespace, where every pod is kept in the cache)."""
    queued: list[str] = []
    cache = ClusterCache(KubeApi(kubeapi.api_client()), on_key=queued.append)
    cache.namespaces.apply(WatchEvent("ADDED", {"metadata": {"name": "busy",
                                                             "labels": {"tls-injector.io/inject": "enabled"}}}))
    assert queued == ["busy"]
    cache.pods.apply(WatchEvent("ADDED", pod))
    assert queued[1:] == (["busy"] if wakes else [])


@pytest.mark.parametrize(("compact", "abort"), [(False, False), (True, True)],
                         ids=["ended", "connection-cut-and-history-compacted"])
def test_the_loop_watches_again_after_its_watches_are_dropped(kubeapi: Emulator, compact: bool, abort: bool) -> None:
    """A dropped watch (and, when history was compacted meanwhile, a 410 Gone) must not blind the loop:
    with the resync an hour away, only a re-established watch can see the new workload."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    with running_loop(kubeapi, watch_timeout_seconds=30):
        _wait_for(lambda: kubeapi.get("secrets", "app0-tls", "ns0") is not None)
        _wait_for(lambda: kubeapi.open_watches("deployments") > 0)
        api = KubeApi(kubeapi.api_client())
        workload = api.get(DEPLOYMENTS, "app0", namespace="ns0")
        if compact:
            api.create(DEPLOYMENTS, {**workload, "metadata": {"name": "filler", "namespace": "ns0"}}, namespace="ns0")
            kubeapi.compact()
        assert kubeapi.drop_watches(abort=abort) > 0
        workload["metadata"] = {"name": "after-drop", "namespace": "ns0"}
        api.create(DEPLOYMENTS, workload, namespace="ns0")
        _wait_for(lambda: kubeapi.get("secrets", "after-drop-tls", "ns0") is not None, timeout=20)


@contextmanager
def running_loop(kubeapi: Emulator, *, watch_timeout_seconds: int, issued_window_seconds: float = ISSUED_WINDOW,
                 **settings: Any) -> Iterator[None]:
    """The controller in a thread, resync an hour away (only its watches can react); it must stop on exit.
    `settings` are the reconciler's (ReconcileSettings fields)."""
    rec = reconciler(kubeapi, Clock(), **{"turn_seconds": NAMESPACE_TURN_SECONDS, **settings})
    loop = Controller(rec.api, rec, None, resync_seconds=3600, debounce_seconds=0.05, min_pass_gap_seconds=0.1,
                      watch_timeout_seconds=watch_timeout_seconds, issued_window_seconds=issued_window_seconds)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    outboxes_before = {t for t in threading.enumerate() if t.name.startswith("events-")}
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    # Its Events' threads (events.POSTERS, named events-N) end with it: one left running posts what its tally
    # held a window later, to a server that is gone (a later test's captured stderr got its log's error).
    deadline = time.monotonic() + 10
    while any(t.name.startswith("events-") and t.is_alive() and t not in outboxes_before
              for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the loop's Events threads outlived it"
        time.sleep(0.05)


def _wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
