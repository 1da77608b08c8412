"""A pass sends its writes while it decides the next objects (Writes.converge_all): at most IN_FLIGHT
unanswered, each answer taken up as a write made at once would be (a failure backs off after one try, a
lost lease sends nothing more), and every object's writing guard in the cache let go, whatever happens."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, reconciler, small_cluster
from tls_injector.kube import KubeApi
from tls_injector.reconcile.loop.cache import ClusterCache
from tls_injector.reconcile.parts import writes


def _cached(emu: Emulator, **kwargs: Any) -> tuple[Any, ClusterCache]:
    rec = reconciler(emu, Clock(), **kwargs)
    cache = ClusterCache(KubeApi(emu.api_client()), on_key=lambda _: None)
    for informer in cache.informers:
        informer.relist()
    rec.attach(cache)
    return rec, cache


def _quiet_keys(cache: ClusterCache) -> list[Any]:
    return [key for informer in cache.informers for key in informer._quiet]


def test_creates_are_sent_at_most_in_flight_at_once_and_all_land(kubeapi: Emulator,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = small_cluster(kubeapi, namespaces=4, per_namespace=10)
    rec, cache = _cached(kubeapi)
    flying, most, lock = 0, 0, threading.Lock()
    real = writes.Writer._send

    def slow_send(self: Any, write: Any) -> Any:
        nonlocal flying, most
        with lock:
            flying += 1
            most = max(most, flying)
        time.sleep(0.01)  # an API server slower than the decisions: sends pile up to the bound
        try:
            return real(self, write)
        finally:
            with lock:
                flying -= 1

    monkeypatch.setattr(writes.Writer, "_send", slow_send)
    report = rec.run_pass()
    assert not report.aborted
    assert all(kubeapi.get("secrets", name, ns) for ns, name in secrets)
    assert 1 < most <= writes.WRITERS <= writes.IN_FLIGHT
    assert report.writes["create"] == len([r for r in kubeapi.faults.writes() if r.resource != "events"])
    assert _quiet_keys(cache) == []
    assert rec.run_pass().write_count == 0


def test_a_failed_create_is_tried_once_and_backs_off_while_the_rest_are_written(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=5)
    rec, cache = _cached(kubeapi)
    failing_ns, failing = secrets[3]
    kubeapi.fail_next("create", "secrets", failing, count=5, code=500, namespace=failing_ns)
    report = rec.run_pass()
    # The emulator logs an injected fault's create without its name (it fails before reading the body).
    tries = [r for r in kubeapi.faults.writes()
             if r.verb == "create" and r.namespace == failing_ns and r.name in (failing, None)]
    assert [r.code for r in tries] == [500]
    assert any(failing in message for message in report.failed)
    assert all(kubeapi.get("secrets", name, ns) for ns, name in secrets if name != failing or ns != failing_ns)
    assert (rec.writer._backoff[("Secret", failing_ns, failing)][0]) == 1
    assert _quiet_keys(cache) == []


def test_a_pass_that_loses_its_lease_sends_nothing_more_and_lets_every_guard_go(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=3, per_namespace=10)
    allowed = {"left": 12}

    def may_write() -> bool:
        allowed["left"] -= 1
        return allowed["left"] >= 0

    rec, cache = _cached(kubeapi, may_write=may_write)
    report = rec.run_pass()
    assert "NotLeader" in (report.aborted or "")
    # The CA Secret's write and each create sent were allowed; nothing was sent after the first refusal.
    assert len([r for r in kubeapi.faults.writes() if r.resource != "events"]) <= 12
    assert _quiet_keys(cache) == []


def _slow_sends(monkeypatch: pytest.MonkeyPatch, seconds: float) -> dict[str, int]:
    """Each send takes `seconds` more (an API server slower than the decisions); the most at once, by action."""
    flying, most, lock = Counter[str](), Counter[str](), threading.Lock()
    real = writes.Writer._send

    def slow_send(self: Any, write: Any) -> Any:
        with lock:
            flying[write.action] += 1
            most[write.action] = max(most[write.action], flying[write.action])
        time.sleep(seconds)
        try:
            return real(self, write)
        finally:
            with lock:
                flying[write.action] -= 1

    monkeypatch.setattr(writes.Writer, "_send", slow_send)
    return most


def test_updates_are_sent_ahead_too(kubeapi: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A renewal wave (as a CA rotation or a burst of template changes) re-issues Secrets that exist: their
    updates are sent while the next are decided, not each waited for."""
    secrets = small_cluster(kubeapi, namespaces=4, per_namespace=10)
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    rec.run_pass()
    before = {(ns, name): kubeapi.get("secrets", name, ns)["metadata"]["resourceVersion"] for ns, name in secrets}
    clock.advance(timedelta(days=60))  # every leaf is due for renewal
    most = _slow_sends(monkeypatch, 0.01)
    report = rec.run_pass()
    assert not report.aborted
    assert report.writes["update"] == len(secrets)
    assert all(kubeapi.get("secrets", name, ns)["metadata"]["resourceVersion"] != before[ns, name]
               for ns, name in secrets)
    assert 1 < most["update"] <= writes.WRITERS
    assert rec.run_pass().write_count == 0


@pytest.mark.parametrize("action", ["create", "update"])
def test_the_wait_for_an_answer_is_charged_to_its_namespace(kubeapi: Emulator, monkeypatch: pytest.MonkeyPatch,
                                                            action: str) -> None:
    """A namespace's writes sent ahead still cost the loop the time their answers take: charged to it
    (budget.py), as a write made on the loop's thread is, so a tenant's wave of new workloads or of
    re-issues on a slow API server is cut at its turn's budget."""
    # More Secrets than are sent before the first answer is waited for, so the waits come within the pass.
    count = writes.IN_FLIGHT + 24
    small_cluster(kubeapi, namespaces=1, per_namespace=count)
    clock = Clock()
    if action == "update":
        reconciler(kubeapi, clock).run_pass()
        clock.advance(timedelta(days=60))  # every leaf is due for renewal
    rec = reconciler(kubeapi, clock, turn_seconds=0.05)  # 40 issues' decisions take a few ms of it
    _slow_sends(monkeypatch, 0.02)  # 40 answers, WRITERS (4) at a time: 0.2 s of waiting, four turns' worth
    report = rec.run_pass()
    assert report.deferred == {"ns0"}
    assert 0 < report.writes[action] < count
