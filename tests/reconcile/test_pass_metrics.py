"""The pass's own health on /metrics: when a full pass last ran to its end, and how many certificates the
cluster needs are not issued (someone else's Secret in the way is one, whatever certificate it holds)."""

from __future__ import annotations

import base64
from datetime import timedelta

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, reconciler, small_cluster
from tls_injector.pki import issue_leaf, make_ca

LAST = "tls_injector_last_successful_pass_timestamp_seconds"


def samples(text: bytes) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text.decode()) for s in f.samples}


def test_the_last_complete_pass_time_moves_on_with_each_pass_and_not_with_one_that_stopped(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    assert samples(generate_latest(rec.metrics.registry))[LAST] == 0
    assert rec.run_pass().converged
    first = samples(generate_latest(rec.metrics.registry))[LAST]
    assert first == clock.now.timestamp()
    clock.advance(timedelta(minutes=10))
    kubeapi.outage(code=503)
    assert rec.run_pass().aborted
    kubeapi.end_outage()
    assert samples(generate_latest(rec.metrics.registry))[LAST] == first
    clock.advance(timedelta(minutes=10))
    rec.run_pass()
    assert samples(generate_latest(rec.metrics.registry))[LAST] == clock.now.timestamp()


def test_a_secret_in_the_way_is_a_certificate_not_issued_and_its_own_certificate_is_not_counted(
    kubeapi: Emulator,
) -> None:
    """The squatter's Secret holds a certificate ending tomorrow: not ours, so not the earliest expiry
    (TLSInjectorCertificateExpiringSoon would page for someone else's Secret), but a certificate missing."""
    small_cluster(kubeapi, namespaces=1, per_namespace=2)
    clock = Clock()
    theirs = issue_leaf(issuer=make_ca(common_name="theirs", now=clock.now), dns_names=["app0"], now=clock.now,
                        validity=timedelta(days=1))
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "app0-tls", "namespace": "ns0"},
                 "data": {"tls.crt": base64.b64encode(theirs.chain_pem).decode(),
                          "tls.key": base64.b64encode(theirs.key_pem).decode()}})
    rec = reconciler(kubeapi, clock)
    rec.run_pass()
    found = samples(generate_latest(rec.metrics.registry))
    assert found["tls_injector_certificates_not_issued"] == 1
    assert found["tls_injector_certificates"] == 1
    assert found["tls_injector_certificates_earliest_expiry_timestamp_seconds"] > (clock.now + timedelta(days=30)
                                                                                  ).timestamp()
