"""Wiring: from where the cluster is to a running reconciler, alone (`reconcile`) or inside `serve`."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from tls_injector.kube import ClusterConfig, KubeApi, KubeError, LeaderElector, api_client, find_cluster
from tls_injector.names import DEFAULT_CLUSTER_DOMAIN
from tls_injector.pki import cluster_domain_from_resolv_conf
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.loop.controller import RESYNC_SECONDS, Controller
from tls_injector.reconcile.native.signer import NativeApis
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings
from tls_injector.web.health import Probes, listen

log = logging.getLogger("tls_injector.reconcile")
RESOLV_CONF = Path("/etc/resolv.conf")
# Kubelet writes a few hundred bytes (at most 32 search domains of 2048 characters in all, plus
# nameservers and options); 64 KiB bounds the read if something else sits at that path.
RESOLV_CONF_LIMIT = 64 * 1024
__all__ = ["KubeError", "api_client", "find_cluster", "pod_certificates_version", "run_once", "run_reconciler",
           "run_until_signalled", "summary"]


def cluster_domain(flag: str | None, *, namespace: str, resolv_conf: Path = RESOLV_CONF) -> str:
    """--cluster-domain when given, else the search path of the pod's resolv.conf, else cluster.local;
    the log says which and why, since every certificate's SANs end in it."""
    if flag:
        domain, source = flag, "--cluster-domain"
    else:
        found = cluster_domain_from_resolv_conf(_read_head(resolv_conf), namespace=namespace)
        domain = found or DEFAULT_CLUSTER_DOMAIN
        source = f"search path of {resolv_conf}" if found else f"default: no svc.<domain> search entry in {resolv_conf}"
    log.info("cluster domain", extra={"domain": domain, "source": source})
    return domain


def _read_head(path: Path) -> str:
    """The file's first RESOLV_CONF_LIMIT bytes as text; empty when it cannot be read (not in a pod)."""
    try:
        with path.open("rb") as f:
            return f.read(RESOLV_CONF_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""


def summary(report: PassReport) -> str:
    """One line for a person (the JSON logs say the rest)."""
    state = "converged" if report.converged else "NOT converged"
    parts = [f"{state}: {report.write_count} writes" + writes_by_action(report.writes)]
    counted = ((report.conflicts, "object in the way, not ours", "objects in the way, not ours"),
               (report.oversized, "object too large, left out", "objects too large, left out"),
               (report.names_refused, "Secret with service names refused", "Secrets with service names refused"),
               (report.secret_names_refused, "Secret name refused", "Secret names refused"),
               (report.clients_refused, "client certificate refused", "client certificates refused"),
               (report.profiles_refused, "Secret with its certificate profile refused",
                "Secrets with their certificate profiles refused"),
               (report.keystores_refused, "keystore refused", "keystores refused"),
               (report.nameless, "certificate names no Service", "certificates name no Service"))
    parts += [f"{len(found)} {one if len(found) == 1 else many}" for found, one, many in counted if found]
    parts += [f"{len(report.failed)} failed"] if report.failed else []
    if report.waiting:  # one reason stands for all: they wait for the same CA
        parts += [f"{len(report.waiting)} certificates wait: {next(iter(report.waiting.values()))}"]
    parts += [f"stopped: {report.aborted}"] if report.aborted else []
    return "; ".join(parts)


def writes_by_action(writes: Mapping[str, int]) -> str:
    """` (2 create, 1 update)`, in a fixed order; nothing for no writes (not a Python dict: a person reads it)."""
    counted = [f"{writes[action]} {action}" for action in sorted(writes) if writes[action]]
    return f" ({', '.join(counted)})" if counted else ""


def pod_certificates_version(cluster: ClusterConfig) -> str | None:
    """The certificates.k8s.io version serving pod certificates, for `serve --pod-certificates auto`."""
    return NativeApis(connect(cluster, ReconcileMetrics())).version()


def connect(cluster: ClusterConfig, metrics: ReconcileMetrics) -> KubeApi:
    return KubeApi(api_client(cluster), timeout=cluster.timeout, on_call=metrics.api_call)


def run_once(cluster: ClusterConfig, settings: ReconcileSettings, *, metrics: ReconcileMetrics | None = None,
             api: KubeApi | None = None) -> PassReport:
    """One full pass, no lease: for `reconcile --once` (a Job, or a person at a terminal)."""
    metrics = metrics or ReconcileMetrics()
    return Reconciler(api or connect(cluster, metrics), settings, metrics=metrics).run_pass()


def controller(cluster: ClusterConfig, settings: ReconcileSettings, *, metrics: ReconcileMetrics,
               identity: str | None = None, resync_seconds: float = RESYNC_SECONDS) -> Controller:
    if settings.turn_seconds is None:  # built by the command (cli.cluster.settings_for), never changed here
        raise ValueError("the loop's settings bound no namespace's turn: build them with settings_for(loop=True)")
    api = connect(cluster, metrics)
    elector = LeaderElector(api, settings.namespace, identity or default_identity())
    reconciler = Reconciler(api, settings, metrics=metrics,
                            may_write=lambda: elector.is_leader(datetime.now(UTC)))
    return Controller(api, reconciler, elector, resync_seconds=resync_seconds)


def run_forever(cluster: ClusterConfig, settings: ReconcileSettings, stop: threading.Event, *,
                metrics: ReconcileMetrics | None = None) -> None:
    controller(cluster, settings, metrics=metrics or ReconcileMetrics()).run(stop)


def run_until_signalled(cluster: ClusterConfig, settings: ReconcileSettings, *,
                        probe_address: tuple[str, int] | None = None, stop: threading.Event | None = None,
                        status: bool = False, on_started: Callable[[], None] | None = None,
                        identity: str | None = None, resync_seconds: float = RESYNC_SECONDS) -> None:
    """`tls-injector reconcile` without --once: until SIGTERM or SIGINT (or `stop`, for tests). With
    `probe_address`, the operator port is served there on plain HTTP while the loop runs: /healthz,
    /readyz, /metrics and, with `status`, the status API and page (tls_injector.web.operator, tls_injector.web.status).
    `on_started` is called once the client is configured and the port open, before the first pass.
    `identity` names this replica in the Lease (default: hostname and PID; tests run two in one process)."""
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
    server = None
    try:
        metrics = ReconcileMetrics()
        loop = controller(cluster, settings, metrics=metrics, identity=identity, resync_seconds=resync_seconds)
        if probe_address is not None:
            host, port = probe_address
            sock = listen(host, port)
            # Imported only here: FastAPI, uvicorn and pydantic cost a second of CPU, which `--once`,
            # `bootstrap` and the reconciler inside `serve` (none serves this port) need not pay.
            from tls_injector.web.operator import OperatorPort  # noqa: PLC0415
            from tls_injector.web.status import status_app  # noqa: PLC0415

            snapshot = loop.snapshot if status else None
            server = OperatorPort(sock, status_app(reconciler_probes(loop, metrics), snapshot))
            server.start()
        if on_started is not None:
            on_started()
        loop.run(stop)
    finally:
        if server is not None:
            server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def reconciler_probes(loop: Controller, metrics: ReconcileMetrics) -> Probes:
    """Healthy and ready while the loop comes round (Controller.alive); the leader and non-leaders alike,
    since a replica that waits for the lease is doing its job."""

    def alive() -> tuple[bool, dict[str, object]]:
        ok = loop.alive()
        return ok, {"status": "ok" if ok else "reconcile loop not running"}

    return Probes(healthy=alive, ready=alive, metrics=lambda: generate_latest(metrics.registry))


async def run_reconciler(cluster: ClusterConfig, settings: ReconcileSettings, *,
                         registry: CollectorRegistry | None = None, metrics: ReconcileMetrics | None = None) -> None:
    """The reconciler as a background task of `serve`: blocking client calls run in a thread; cancelling
    the task stops the loop within one lease period (2 s)."""
    stop = threading.Event()
    try:
        await asyncio.to_thread(run_forever, cluster, settings, stop, metrics=metrics or ReconcileMetrics(registry))
    except KubeError as e:  # the webhook keeps serving; certificates are not kept current, and the log says why
        log.error("reconciler not running", extra={"cluster": cluster.describe, "error": str(e)})
    finally:
        stop.set()


def default_identity() -> str:
    """Pod name (the hostname in Kubernetes) plus PID, unique per replica and readable in the Lease."""
    return f"{socket.gethostname()}_{os.getpid()}"
