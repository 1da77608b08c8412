"""`tls-injector doctor`: check that the installation is healthy."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from tls_injector.cli import flags
from tls_injector.cli.cluster import (
    NO_CLUSTER,
    ca_settle_flag,
    connection_flags,
    find_cluster,
    profile_flags,
    profile_problem,
    settings_for,
    unreachable,
    user_ca_flags,
    webhook_flags,
)
from tls_injector.cli.command import EXIT_FINDINGS, EXIT_OK, Command, fail
from tls_injector.cli.output import output_flag, structured, wants_structure
from tls_injector.logs import configure_logging
from tls_injector.names import RECONCILER_ACCOUNT


def add(doctor: argparse.ArgumentParser) -> None:
    connection_flags(doctor)
    webhook_flags(doctor)
    doctor.add_argument("--webhook-address", type=flags.host_port,
                        help="HOST:PORT where the webhook answers, e.g. 127.0.0.1:8443 after `kubectl -n tls-injector "
                             "port-forward svc/tls-injector 8443:443` (default: the Service's DNS name, which "
                             "resolves only inside the cluster)")
    doctor.add_argument("--trust-domain", type=flags.trust_domain,
                        help="the reconciler's --trust-domain, to check client certificates' SPIFFE IDs (default: "
                             "the cluster domain)")
    user_ca_flags(doctor)  # the reconciler's, to check those Secrets as its passes do
    profile_flags(doctor)  # the reconciler's, to judge workloads' certificate profiles as its passes do
    ca_settle_flag(doctor, "the reconciler's --ca-settle, to judge a hub's members' held root rotations (--hub) as "
                           "its passes do")
    doctor.add_argument("--reconciler-service-account", default=RECONCILER_ACCOUNT,
                        help="the reconciler's service account in --namespace, whose permissions are checked")
    doctor.add_argument("--hub", action="store_true",
                        help="this cluster is a hub (reconcile --hub): also reach every registered member with its "
                             "kubeconfig, read-only, and check its intermediates (docs/multicluster.md)")
    output_flag(doctor, json_help="json is one object per check, and is printed even when the API does not answer")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.doctor import (  # noqa: PLC0415 - only the commands that talk to a cluster load the client
        ApiUnreachable,
        DoctorSettings,
        api_unreachable,
        read,
        render_json,
        render_text,
        run_checks,
    )
    from tls_injector.offline.rulesfile import default_rule_set  # noqa: PLC0415
    from tls_injector.reconcile.loop import runner  # noqa: PLC0415
    from tls_injector.reconcile.loop.bootstrap import connect  # noqa: PLC0415
    from tls_injector.reconcile.parts.webhook_plan import WebhookSettings  # noqa: PLC0415
    from tls_injector.rules import exception_policy_names  # noqa: PLC0415

    configure_logging("warning")  # the report is the output; info lines would only interleave with it
    cluster = find_cluster(args)
    # An API that does not answer (or a configuration that does not load) leaves nothing to check: one
    # line and exit 2 after one --timeout, as `reconcile --once` and `bootstrap` do, not a report of one
    # failed check (exit 1 means the cluster was read and something in it is wrong). With -o json the
    # same one failed check is also the report on stdout, so a script reading it always gets JSON.
    problem = NO_CLUSTER if cluster is None else unreachable(cluster, "doctor")
    if cluster is None or problem:
        if wants_structure(args):
            sys.stdout.write(structured(render_json(api_unreachable(problem or NO_CLUSTER)), args.output))
        return fail("doctor", problem or NO_CLUSTER)
    if problem := profile_problem(args):
        return fail("doctor", problem)
    reconcile = settings_for(args)
    webhook = reconcile.webhook or WebhookSettings(service=args.webhook_service, secret_name=args.webhook_secret,
                                                   configurations=(), cluster_domain=reconcile.cluster_domain)
    settings = DoctorSettings(namespace=reconcile.namespace, cluster_domain=reconcile.cluster_domain, webhook=webhook,
                              ca_secret=reconcile.ca.secret_name, webhook_address=args.webhook_address,
                              trust_domain=args.trust_domain or "",
                              reconciler_account=args.reconciler_service_account, hub=args.hub,
                              user_ca_secrets=reconcile.user_ca_secrets, profiles=reconcile.profiles,
                              ca_settle=reconcile.ca.settle,
                              exception_policies=exception_policy_names(default_rule_set()))
    try:
        results = run_checks(read(connect(cluster), settings, now=datetime.now(UTC)))
    except runner.KubeError as error:  # the configuration itself cannot be loaded
        return fail("doctor", str(error))
    except ApiUnreachable as error:
        results = api_unreachable(str(error))
    sys.stdout.write(structured(render_json(results), args.output) if wants_structure(args) else render_text(results))
    return EXIT_FINDINGS if any(r.status == "error" for r in results) else EXIT_OK


COMMAND = Command(
    name="doctor", add=add, run=run,
    help="check that the installation is healthy (exit 0 healthy, 1 a check failed)",
    description="Read the cluster and check, one line each: the webhook configurations and whether every "
                "caBundle trusts the certificate the webhook serves, the CA sets, every opted-in workload's "
                "certificate, pods that missed the injection or mount a missing Secret, the reconciler's RBAC "
                "and its leader Lease. Exit status 0 when no check failed (warnings allowed), 1 when one did, "
                "2 for a usage or configuration error or an API server that does not answer within --timeout.",
    examples=(
        "tls-injector doctor                                    # the cluster of the current kubeconfig context",
        "kubectl -n tls-injector port-forward svc/tls-injector 8443:443 &",
        "tls-injector doctor --webhook-address 127.0.0.1:8443   # also the certificate the webhook serves",
        "tls-injector doctor -o json --timeout 10s              # for a script; JSON even when nothing answers",
    ))
