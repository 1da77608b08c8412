"""`tls-injector status [NAMESPACE/WORKLOAD]`: a workload's certificate, or what needs attention, read from
the cluster directly (app.doctor.workload_status), with doctor's exit statuses."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app import names
from app.cli.cluster import NO_CLUSTER, connection_flags, find_cluster, profile_bounds, profile_flags, unreachable
from app.cli.command import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, Command, fail
from app.logs import configure_logging

if TYPE_CHECKING:
    from app.doctor.snapshot import DoctorSettings
    from app.doctor.workload_status import Cluster


def add(status: argparse.ArgumentParser) -> None:
    status.add_argument("workload", nargs="?", metavar="NAMESPACE/WORKLOAD",
                        help="one workload (its name, or Kind/name where names clash: shop/web, "
                             "shop/statefulset/db); without it, what needs attention in the whole cluster")
    connection_flags(status)
    profile_flags(status)  # the reconciler's, to judge workloads' certificate profiles as its passes do
    status.add_argument("-o", "--output", choices=["text", "json"], default="text", help="report format")


def split_workload(value: str) -> tuple[str, str]:
    """NAMESPACE/WORKLOAD (WORKLOAD may be Kind/name) -> (namespace, workload); ValueError when malformed."""
    namespace, _, workload = value.partition("/")
    if not namespace or not workload:
        raise ValueError(f"{value!r} is not NAMESPACE/WORKLOAD")
    return namespace, workload


def read(args: argparse.Namespace, command: str) -> Cluster | int:
    """The cluster as `status` and `renew` read it, or the exit status of why it could not be read."""
    from app.doctor import ApiUnreachable  # noqa: PLC0415 - only the commands that talk to a cluster load the client
    from app.doctor.workload_status import read_status  # noqa: PLC0415
    from app.reconcile import runner  # noqa: PLC0415
    from app.reconcile.bootstrap import connect  # noqa: PLC0415

    configure_logging("warning")  # the report is the output
    cluster = find_cluster(args)
    if cluster is None:
        return fail(command, NO_CLUSTER)
    if problem := unreachable(cluster):
        return fail(command, problem)
    try:
        return read_status(connect(cluster), doctor_settings(args), now=datetime.now(UTC))
    except (runner.KubeError, ApiUnreachable) as error:
        return fail(command, str(error))


def doctor_settings(args: argparse.Namespace) -> DoctorSettings:
    from app.doctor.snapshot import DoctorSettings  # noqa: PLC0415
    from app.kube import own_namespace  # noqa: PLC0415
    from app.reconcile.runner import cluster_domain  # noqa: PLC0415
    from app.reconcile.webhook_plan import WebhookSettings  # noqa: PLC0415

    namespace = own_namespace(args.namespace)
    domain = cluster_domain(args.cluster_domain, namespace=namespace)
    webhook = WebhookSettings(service=names.WEBHOOK_SERVICE, secret_name=names.WEBHOOK_SECRET, configurations=(),
                              cluster_domain=domain)
    return DoctorSettings(namespace=namespace, cluster_domain=domain, webhook=webhook, ca_secret=names.CA_SECRET,
                          profiles=profile_bounds(args))


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.doctor import workload_status as ws  # noqa: PLC0415
    from app.kube import KubeError  # noqa: PLC0415

    wanted = None
    if args.workload:
        try:
            wanted = split_workload(args.workload)
        except ValueError as error:
            parser.error(str(error))
    cluster = read(args, "status")
    if isinstance(cluster, int):
        return cluster
    try:
        if wanted is None:
            items, ready = ws.summary(cluster)
            sys.stdout.write(ws.to_json(items) if args.output == "json" else ws.render_summary(items))
            return EXIT_OK if ready and not any(level == "crit" for level, _ in items) else EXIT_FINDINGS
        found = ws.report(cluster, ws.target_of(cluster, *wanted))
    except ws.NoSuchWorkload as error:
        return fail("status", str(error))
    except KubeError as error:
        return fail("status", f"{type(error).__name__}: {error}")
    sys.stdout.write(ws.to_json(found) if args.output == "json" else ws.render_report(found))
    return EXIT_OK if found.ready else EXIT_FINDINGS


COMMAND = Command(
    name="status", add=add, run=run,
    help="a workload's certificate, or what needs attention (exit 0 ready, 1 not)",
    description="Read the cluster directly (no reconciler, port-forward or leader needed). For NAMESPACE/WORKLOAD: "
                "its Secret, the certificate's names, dates and issuer, the CA it chains to and that CA's state, "
                "the conditions (Ready and any other trouble, as the status API gives them), its pods and whether "
                "they carry the injection, its recent Events. Without it: what needs attention, in the status "
                "page's order. Exit status as doctor's: 0 ready (every certificate Ready, nothing expiring), 1 "
                "not (a warning alone, such as a pod without the injection, does not fail it), "
                f"{EXIT_USAGE} for a usage error, no such workload, or an API server that does not "
                "answer within --timeout.")
