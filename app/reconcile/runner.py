"""Wiring: from where the cluster is to a running reconciler, alone (`reconcile`) or inside `serve`."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from app.kube import ClusterConfig, KubeApi, LeaderElector, api_client
from app.reconcile.controller import Controller
from app.reconcile.metrics import ReconcileMetrics
from app.reconcile.reconciler import PassReport, Reconciler, ReconcileSettings


def connect(cluster: ClusterConfig, metrics: ReconcileMetrics) -> KubeApi:
    return KubeApi(api_client(cluster), on_call=metrics.api_call)


def run_once(cluster: ClusterConfig, settings: ReconcileSettings, *, metrics: ReconcileMetrics | None = None,
             api: KubeApi | None = None) -> PassReport:
    """One full pass, no lease: for `reconcile --once` (a Job, or a person at a terminal)."""
    metrics = metrics or ReconcileMetrics()
    return Reconciler(api or connect(cluster, metrics), settings, metrics=metrics).run_pass()


def controller(cluster: ClusterConfig, settings: ReconcileSettings, *, metrics: ReconcileMetrics,
               identity: str | None = None) -> Controller:
    api = connect(cluster, metrics)
    elector = LeaderElector(api, settings.namespace, identity or default_identity())
    reconciler = Reconciler(api, settings, metrics=metrics,
                            may_write=lambda: elector.is_leader(datetime.now(UTC)))
    return Controller(api, reconciler, elector)


def run_forever(cluster: ClusterConfig, settings: ReconcileSettings, stop: threading.Event, *,
                metrics: ReconcileMetrics | None = None) -> None:
    controller(cluster, settings, metrics=metrics or ReconcileMetrics()).run(stop)


async def run_reconciler(cluster: ClusterConfig, settings: ReconcileSettings, *,
                         registry: CollectorRegistry | None = None) -> None:
    """The reconciler as a background task of `serve`: blocking client calls run in a thread; cancelling
    the task stops the loop within one lease period (2 s)."""
    stop = threading.Event()
    try:
        await asyncio.to_thread(run_forever, cluster, settings, stop, metrics=ReconcileMetrics(registry))
    finally:
        stop.set()


def default_identity() -> str:
    """Pod name (the hostname in Kubernetes) plus PID, unique per replica and readable in the Lease."""
    return f"{socket.gethostname()}_{os.getpid()}"
