"""The reconciler as `serve` runs it: an asyncio background task that a cancel stops."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, generate_latest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, small_cluster
from tls_injector.kube import ClusterConfig
from tls_injector.reconcile.core.budget import NAMESPACE_TURN_SECONDS
from tls_injector.reconcile.loop.runner import run_reconciler
from tls_injector.reconcile.parts.reconciler import ReconcileSettings


def test_the_background_task_leads_converges_exports_metrics_and_stops_on_cancel(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=1, per_namespace=2)
    registry = CollectorRegistry()

    async def serve_for_a_while() -> None:
        task = asyncio.create_task(run_reconciler(ClusterConfig(server=kubeapi.url),
                                                  ReconcileSettings(namespace=OWN_NS, per_object_metrics=True,
                                                                    turn_seconds=NAMESPACE_TURN_SECONDS),
                                                  registry=registry))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if all(kubeapi.get("secrets", n, ns) for ns, n in secrets):
                break
            await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(serve_for_a_while())
    assert all(kubeapi.get("secrets", n, ns) for ns, n in secrets)
    lease = kubeapi.get("leases", "tls-injector-leader", OWN_NS)
    assert lease is not None
    text = generate_latest(registry).decode()
    assert 'tls_injector_certificate_expiry_timestamp_seconds{namespace="ns0",secret="app0-tls"}' in text
    assert 'tls_injector_rotations_total{kind="leaf",reason="missing"} 2.0' in text
    assert "tls_injector_leader 1.0" in text
    assert 'tls_injector_kube_api_requests_total{outcome="ok",verb="create"}' in text
