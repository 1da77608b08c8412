"""Issue 24, finding 5: a broken workload is reported once while it stays broken, not once per pass.

Before: 20 Deployments whose Secret is held by someone else wrote 20 new Events on every pass (21, 41,
61, 81, 101 after five passes). The real reconciler against the API emulator.
"""

from __future__ import annotations

from datetime import timedelta

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tls_injector.kube import SECRETS, KubeApi


def _broken_cluster(emu: Emulator, count: int) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, "team-a")
    for i in range(count):
        deployment(emu, f"app{i}", "team-a")
        emu.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": f"app{i}-tls", "namespace": "team-a"}, "data": {}})
    deployment(emu, "healthy", "team-a")


def test_twenty_broken_deployments_are_twenty_events_after_five_passes(kubeapi: Emulator) -> None:
    _broken_cluster(kubeapi, 20)
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    counts = []
    for _ in range(5):
        report = rec.run_pass()
        assert len(report.refused) == 20  # still reported at every pass: log, report, `--once` exit 1
        counts.append(len(kubeapi.objects("events")))
        clock.advance(timedelta(minutes=1))
    assert counts == [21] * 5  # 20 SecretConflict + the namespace's CertificatesIssued, once


def test_a_condition_that_ends_and_comes_back_is_reported_again(kubeapi: Emulator) -> None:
    _broken_cluster(kubeapi, 1)
    rec = reconciler(kubeapi, Clock())
    rec.run_pass()
    KubeApi(kubeapi.api_client()).delete(SECRETS, "app0-tls", namespace="team-a")
    assert rec.run_pass().converged  # issued now: the conflict ended
    KubeApi(kubeapi.api_client()).delete(SECRETS, "app0-tls", namespace="team-a")
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": "app0-tls", "namespace": "team-a"}, "data": {}})
    rec.run_pass()
    conflicts = [e for e in kubeapi.objects("events") if e["reason"] == "SecretConflict"]
    assert len(conflicts) == 2


def test_a_write_the_api_server_keeps_refusing_is_retried_with_backoff(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "team-a")
    deployment(kubeapi, "web", "team-a")
    kubeapi.faults.fail_next("create", "secrets", "web-tls", code=422, count=1000, namespace="team-a")
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    tries = []
    for _ in range(12):  # 12 passes, 10 s apart: 2 minutes
        before = _creates(kubeapi)
        assert not rec.run_pass().converged
        tries.append(_creates(kubeapi) - before)
        clock.advance(timedelta(seconds=10))
    # tried at once, again at the next pass, then after 30 s, then 60 s: not at every pass
    assert tries[:2] == [1, 1]
    assert sum(tries) <= 5, tries
    assert len([e for e in kubeapi.objects("events") if e["reason"] == "CertificateFailed"]) == 1


def _creates(emu: Emulator) -> int:
    return sum(1 for r in emu.faults.log if (r.verb, r.resource, r.namespace) == ("create", "secrets", "team-a"))
