"""`tls-injector reconcile`: issue, renew and rotate certificates; mirror trust bundles."""

from __future__ import annotations

import argparse
import logging

from tls_injector import names
from tls_injector.cli import flags
from tls_injector.cli.cluster import (
    NO_CLUSTER,
    cluster_flags,
    find_cluster,
    profile_problem,
    same_ca_secrets,
    settings_for,
    unreachable,
    unverified_tls,
)
from tls_injector.cli.command import EXIT_FINDINGS, EXIT_OK, LOG_LEVELS, Command
from tls_injector.cli.startup import HeldLogs
from tls_injector.web.heap import cap_malloc_arenas

log = logging.getLogger("tls_injector")


def add(reconcile: argparse.ArgumentParser) -> None:
    reconcile.add_argument("--once", action="store_true",
                           help="one full pass, then exit: 0 when everything converged, 1 otherwise")
    cluster_flags(reconcile)
    reconcile.add_argument("--hub", action="store_true",
                           help="this cluster is the hub of several (docs/multicluster.md): its CAs are the roots, "
                                "and every pass issues each member registered in --namespace (a Secret labelled "
                                f"{names.MEMBER_LABEL}=<name> with a kubeconfig) its intermediates")
    reconcile.add_argument("--metrics-host", default="0.0.0.0",  # noqa: S104 - Prometheus and the kubelet
                           help="address of the plain-HTTP operator port: /healthz, /readyz, /metrics, "
                                "/api/v1/status and the status page /")
    reconcile.add_argument("--metrics-port", type=flags.port, default=8080,
                           help="the operator port (0: none); not used with --once")
    reconcile.add_argument("--status", action="store_true",
                           help="also serve the status of the last pass on the operator port (/api/v1/status and "
                                "the page /): it names every opted-in namespace, workload and Secret to whoever "
                                "reaches the port, so it is off unless asked, like --metrics-per-object")
    reconcile.add_argument("--resync-period", type=flags.duration, metavar="DURATION",
                           help="the loop's full pass from its cache, at least this often (default 10m): it renews "
                                "certificates whose time came and repairs anything a watch missed; a change is "
                                "reconciled when it happens, not at the resync")
    reconcile.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.reconcile.loop import runner  # noqa: PLC0415 - only the reconciling commands load the client

    cap_malloc_arenas()  # before any thread: what they decode is held in two heaps, not a dozen (web/heap.py)

    with HeldLogs(args.log_level) as start:
        cluster = find_cluster(args)
        if cluster is None:
            return start.failed("reconcile", NO_CLUSTER)
        # One pass against an API that does not answer would wait --timeout per call: ask once, first.
        # The loop instead retries (an apiserver restarting is no reason for the pod to crash).
        once = unreachable(cluster, "reconcile") if args.once else None
        if problem := same_ca_secrets(args) or profile_problem(args) or once:
            return start.failed("reconcile", problem)
        if not args.once and (notice := unverified_tls(cluster)):
            log.warning(notice)  # once, in place of the HTTP library's warning on every request
        settings = settings_for(args, loop=not args.once)
        try:
            if args.once:
                start.started()
                report = runner.run_once(cluster, settings)
                print(runner.summary(report), flush=True)
                return EXIT_OK if report.converged else EXIT_FINDINGS
            probe = (args.metrics_host, args.metrics_port) if args.metrics_port else None
            runner.run_until_signalled(cluster, settings, probe_address=probe, status=args.status,
                                       **({"resync_seconds": args.resync_period} if args.resync_period else {}),
                                       on_started=start.started)
        except OSError as error:  # the metrics port is taken or not ours to bind
            return start.failed("reconcile", f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: "
                                             f"{error}")
        except runner.KubeError as error:  # configuration that cannot be loaded: a message, not a traceback
            return start.failed("reconcile", str(error))
    return EXIT_OK


COMMAND = Command(
    name="reconcile", add=add, run=run, help="issue, renew and rotate certificates; mirror trust bundles",
    description="The reconciler alone (serve runs it too, unless --no-reconciler): it owns the CAs in --namespace, "
                "issues and renews every opted-in workload's certificate Secret, mirrors the trust bundle into "
                "their namespaces and keeps the webhook's serving certificate and caBundle fresh. Several "
                "replicas elect one leader with a Lease. --once makes one full pass and exits.",
    examples=(
        "tls-injector reconcile --once                          # one pass against the current kubeconfig context",
        "tls-injector reconcile --namespace tls-injector --status   # the loop, with the status page on :8080",
    ))
