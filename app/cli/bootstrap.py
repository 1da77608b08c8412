"""`tls-injector bootstrap`: the webhook's serving certificate, and its CA in every caBundle."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from tls_injector.cli.cluster import (
    NO_CLUSTER,
    connection_flags,
    find_cluster,
    settings_for,
    unreachable,
    webhook_flags,
)
from tls_injector.cli.command import EXIT_FINDINGS, EXIT_OK, LOG_LEVELS, Command, fail
from tls_injector.cli.startup import HeldLogs


def add(boot: argparse.ArgumentParser) -> None:
    connection_flags(boot)
    webhook_flags(boot)
    boot.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged")
    # A user-provided CA (--ca-secret) is for the workloads' certificates, never the webhook's own.
    boot.set_defaults(ca_secret=None, client_ca_secret=None)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.reconcile.loop import runner  # noqa: PLC0415 - only the commands that talk to a cluster load the client
    from tls_injector.reconcile.loop.bootstrap import bootstrap, bootstrap_settings, connect  # noqa: PLC0415

    with HeldLogs(args.log_level) as start:
        settings = bootstrap_settings(settings_for(args))
        if settings is None:
            parser.error("--webhook-configurations must name at least one webhook configuration")
        cluster = find_cluster(args)
        if cluster is None:
            return start.failed("bootstrap", NO_CLUSTER)
        # a configuration that cannot load, an API that does not answer
        if problem := unreachable(cluster, "bootstrap"):
            return start.failed("bootstrap", problem)
        start.started()
        try:
            result = bootstrap(connect(cluster), settings, now=datetime.now(UTC))
        except runner.KubeError as error:
            return fail("bootstrap", str(error))
    print(runner.summary(result.report), flush=True)
    for problem in result.problems:
        print(f"tls-injector bootstrap: {problem}", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_FINDINGS


COMMAND = Command(
    name="bootstrap", add=add, run=run,
    help="create or renew the webhook's serving certificate and put its CA in every caBundle",
    description="Create the webhook CA and serving certificate Secrets when missing or invalid, put the CA "
                "bundle into clientConfig.caBundle of every entry of the webhook configurations, then check "
                "that each entry trusts the serving certificate. Safe to re-run: with nothing to do it "
                "writes nothing. Exit status 0 when the API server will trust the webhook, 1 otherwise.")
