"""`tls-injector status [NAMESPACE/WORKLOAD]`: a workload's certificate, or what needs attention, read from
the cluster directly (tls_injector.doctor.workload_status), with doctor's exit statuses."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tls_injector import names
from tls_injector.cli import flags
from tls_injector.cli.cluster import (
    NO_CLUSTER,
    connection_flags,
    find_cluster,
    profile_bounds,
    profile_flags,
    unreachable,
)
from tls_injector.cli.command import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, Command, fail
from tls_injector.cli.flags import quoted
from tls_injector.cli.output import output_flag, structured, wants_structure
from tls_injector.logs import configure_logging
from tls_injector.web.page import EXPIRING_WITHIN

if TYPE_CHECKING:
    from tls_injector.doctor.snapshot import DoctorSettings
    from tls_injector.doctor.workload_status import Cluster


def add(status: argparse.ArgumentParser) -> None:
    status.add_argument("workload", nargs="?", type=workload_name, metavar="NAMESPACE/WORKLOAD",
                        help="one workload (its name, or Kind/name where names clash: shop/web, "
                             "shop/statefulset/db); without it, what needs attention in the whole cluster")
    connection_flags(status)
    profile_flags(status)  # the reconciler's, to judge workloads' certificate profiles as its passes do
    output_flag(status)


# A workload's name (a Kubernetes object name) is at most 253 characters, and so is a Kind; longer is no
# workload, and is refused before it is quoted in a message.
MAX_WORKLOAD_CHARS = 2 * 253 + 1


def workload_name(value: str) -> tuple[str, str]:
    """NAMESPACE/WORKLOAD (WORKLOAD may be Kind/name) -> (namespace, workload): a usage error when
    malformed, an empty argument included (it names no workload; it is not "every workload")."""
    try:
        return split_workload(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def split_workload(value: str) -> tuple[str, str]:
    """NAMESPACE/WORKLOAD (WORKLOAD may be Kind/name) -> (namespace, workload); ValueError when malformed."""
    namespace, _, workload = value.partition("/")
    kind, _, name = workload.rpartition("/")
    if not namespace or not name or (workload.count("/") > 1) or (workload.count("/") == 1 and not kind):
        raise ValueError(f"{quoted(value)} is not NAMESPACE/WORKLOAD or NAMESPACE/KIND/WORKLOAD")
    if len(workload) > MAX_WORKLOAD_CHARS:
        raise ValueError(f"{quoted(value)} is longer than any workload's name")
    try:
        flags.namespace(namespace)
    except argparse.ArgumentTypeError as error:
        raise ValueError(str(error)) from error
    return namespace, workload


def read(args: argparse.Namespace, command: str) -> Cluster | int:
    """The cluster as `status` and `renew` read it, or the exit status of why it could not be read."""
    from tls_injector.doctor import ApiUnreachable  # noqa: PLC0415 - only the commands that talk to a cluster load the client
    from tls_injector.doctor.workload_status import read_status  # noqa: PLC0415
    from tls_injector.reconcile.loop import runner  # noqa: PLC0415
    from tls_injector.reconcile.loop.bootstrap import connect  # noqa: PLC0415

    configure_logging("warning")  # the report is the output
    cluster = find_cluster(args)
    if cluster is None:
        return fail(command, NO_CLUSTER)
    if problem := unreachable(cluster, command, flag=args.timeout_flag):
        return fail(command, problem)
    try:
        return read_status(connect(cluster), doctor_settings(args), now=datetime.now(UTC))
    except (runner.KubeError, ApiUnreachable) as error:
        return fail(command, str(error))


def doctor_settings(args: argparse.Namespace) -> DoctorSettings:
    from tls_injector.doctor.snapshot import DoctorSettings  # noqa: PLC0415
    from tls_injector.kube import own_namespace  # noqa: PLC0415
    from tls_injector.reconcile.loop.runner import cluster_domain  # noqa: PLC0415
    from tls_injector.reconcile.parts.webhook_plan import WebhookSettings  # noqa: PLC0415

    namespace = own_namespace(args.namespace)
    domain = cluster_domain(args.cluster_domain, namespace=namespace)
    webhook = WebhookSettings(service=names.WEBHOOK_SERVICE, secret_name=names.WEBHOOK_SECRET, configurations=(),
                              cluster_domain=domain)
    return DoctorSettings(namespace=namespace, cluster_domain=domain, webhook=webhook, ca_secret=names.CA_SECRET,
                          profiles=profile_bounds(args))


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.doctor import workload_status as ws  # noqa: PLC0415
    from tls_injector.kube import KubeError  # noqa: PLC0415

    cluster = read(args, "status")
    if isinstance(cluster, int):
        return cluster
    try:
        if args.workload is None:
            items, ready = ws.summary(cluster)
            sys.stdout.write(structured(ws.to_json(items), args.output) if wants_structure(args)
                             else ws.render_summary(items))
            return EXIT_OK if ready and not any(level == "crit" for level, _ in items) else EXIT_FINDINGS
        found = ws.report(cluster, ws.target_of(cluster, *args.workload))
    except ws.NoSuchWorkload as error:
        return fail("status", str(error))
    except KubeError as error:
        return fail("status", f"{type(error).__name__}: {error}")
    sys.stdout.write(structured(ws.to_json(found), args.output) if wants_structure(args) else ws.render_report(found))
    # Ready alone is not enough: a certificate about to end, or past its renewal time, is what this exit
    # status exists to catch (the attention list marks the same ones).
    return EXIT_OK if found.ready and not found.attention else EXIT_FINDINGS


COMMAND = Command(
    name="status", add=add, run=run,
    help="a workload's certificate, or what needs attention (exit 0 ready, 1 not)",
    description="Read the cluster directly (no reconciler, port-forward or leader needed). For NAMESPACE/WORKLOAD: "
                "its Secret, the certificate's names, dates and issuer, the CA it chains to and that CA's state, "
                "the conditions (Ready and any other trouble, as the status API gives them), its pods and whether "
                "they carry the injection, the TLS change its pod template names (an exception), its recent Events. "
                "Without it: what needs attention, in the status "
                "page's order. Exit status as doctor's: 0 ready (every certificate Ready, none ending within "
                f"{EXPIRING_WITHIN.days} days or past its renewal time), 1 not (a warning alone, such as a pod "
                "without the injection, does not fail it), "
                f"{EXIT_USAGE} for a usage error, no such workload, or an API server that does not "
                "answer within --timeout.")
