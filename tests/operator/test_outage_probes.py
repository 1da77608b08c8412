"""What the reconciler's probes and leader gauge say while the API server is down (docs/operations.md,
"When the API server is down"): /healthz and /readyz stay 200, since the loop keeps coming round and a
restart would not bring the API server back; tls_injector_leader drops to 0 once the renew deadline has
passed, and the pass gauges go empty with it."""

from __future__ import annotations

import time

import httpx

from tests.kubeapi import Emulator
from tests.operator.scene import bare_pod
from tests.operator.test_lost_lease import replica, wait_for
from tests.reconcile.cluster import small_cluster
from tls_injector.kube.lease import RENEW_DEADLINE, RETRY_PERIOD


def test_in_an_api_outage_the_probes_stay_ok_and_the_replica_stops_claiming_to_lead(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    bare_pod(kubeapi, "orphan", "ns0")
    with replica(kubeapi.url, "a") as a:
        wait_for(a.reports, within=30)
        kubeapi.outage(refuse=True)
        try:
            started = time.monotonic()
            deadline = started + (RENEW_DEADLINE + RETRY_PERIOD).total_seconds()
            while not a.silent():
                assert time.monotonic() < deadline, "still claims to lead after the renew deadline"
                for probe in ("/healthz", "/readyz"):
                    assert httpx.get(a.base + probe, timeout=5).status_code == 200, probe
                time.sleep(0.2)
            for probe in ("/healthz", "/readyz"):
                assert httpx.get(a.base + probe, timeout=5).status_code == 200, probe
        finally:
            kubeapi.end_outage()
        wait_for(a.reports, within=30)  # leads again once the API server is back
