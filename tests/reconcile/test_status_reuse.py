"""A pass's status keeps the last pass's entry for each certificate that is as it was (status.workload_statuses,
`previous`): the new snapshot is built while the old one is still served, so at 100,000 workloads the two would
otherwise be held side by side at every pass's peak."""

from __future__ import annotations

from datetime import timedelta

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, reconciler, small_cluster
from tls_injector import names
from tls_injector.kube import SECRETS, KubeApi


def test_an_unchanged_certificate_keeps_its_entry_and_a_renewed_one_gets_a_new_one(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    rec.run_pass()
    rec.run_pass()
    assert rec.status is not None
    before = {(w.namespace, w.secret): w for w in rec.status.workloads}
    assert set(before) == set(secrets)
    assert all(w.not_after is not None for w in before.values())

    clock.advance(timedelta(hours=1))
    renewed = secrets[0]
    secret = kubeapi.get("secrets", renewed[1], renewed[0])
    assert secret is not None
    secret["metadata"]["annotations"][names.FORCE_RENEW_ANNOTATION] = "now"
    KubeApi(kubeapi.api_client()).replace(SECRETS, secret)
    report = rec.run_pass()
    assert report.reasons == {"renewed:force-renew": 1}, report
    after = {(w.namespace, w.secret): w for w in rec.status.workloads}
    assert set(after) == set(secrets)
    assert after[renewed] is not before[renewed]
    assert after[renewed].not_after == before[renewed].not_after + timedelta(hours=1)
    for key in secrets[1:]:
        assert after[key] is before[key], key  # the same object: equal, so not made again
