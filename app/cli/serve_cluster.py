"""What `serve` takes from a cluster when one is configured: whether /mutate may inject pod
certificates (asked of discovery once), and the reconciler run in the background."""

from __future__ import annotations

import argparse
import functools
import logging
from typing import TYPE_CHECKING

from tls_injector.cli.cluster import find_cluster, settings_for, unverified_tls

log = logging.getLogger("tls_injector")

if TYPE_CHECKING:
    from tls_injector.web.health import BackgroundTask, Health
    from tls_injector.web.metrics import ServerMetrics


class UnusableCluster(Exception):
    """The configured cluster cannot be reached with what was given (kubeconfig missing or malformed)."""


def webhook_pod_certificates(args: argparse.Namespace) -> tuple[bool, str]:
    """Whether /mutate may inject pod certificates, and why, for the start-up line. `auto` asks discovery
    once when a cluster is configured; the webhook of the split install has no API access, so there it
    must be told (`on`) and `auto` means off."""
    if args.pod_certificates != "auto":
        return args.pod_certificates == "on", f"{args.pod_certificates} (--pod-certificates)"
    if args.no_reconciler:
        return False, "off (auto, and no API access to find out: --pod-certificates on where they are served)"
    from tls_injector.reconcile.loop import runner  # noqa: PLC0415 - the client is loaded only when a cluster may be there

    cluster = find_cluster(args)
    if cluster is None:
        return False, "off (auto, no cluster configured)"
    try:
        version = runner.pod_certificates_version(cluster)
    except runner.KubeError as error:
        return False, f"off (auto, discovery failed: {error})"
    return (True, f"on (auto: certificates.k8s.io/{version})") if version else (False, "off (auto: not served)")


def reconciler_in_background(args: argparse.Namespace, metrics: ServerMetrics,
                             health: Health) -> tuple[list[BackgroundTask], str]:
    """The reconciler runs inside `serve` only when a cluster is configured and --no-reconciler is not
    given; otherwise serve runs alone. Also returns what the start-up line says about it. With the
    reconciler here, /readyz also fails while its last pass found the live caBundle not trusting the
    certificate this server serves (checked once per pass, never per request)."""
    if args.no_reconciler:
        return [], "off (--no-reconciler)"
    from tls_injector.reconcile.loop import runner  # noqa: PLC0415 - the client is loaded only when a cluster may be there

    cluster = find_cluster(args)
    if cluster is None:
        return [], "off (no cluster configured: no in-cluster service account, no kubeconfig)"
    try:  # a configuration that cannot load stops the start, rather than failing every pass later
        runner.api_client(cluster)
    except runner.KubeError as error:
        raise UnusableCluster(str(error)) from None
    if notice := unverified_tls(cluster):
        log.warning(notice)  # once, in place of the HTTP library's warning on every request
    from tls_injector.reconcile.core.metrics import ReconcileMetrics  # noqa: PLC0415

    settings = settings_for(args, loop=True)
    reconcile_metrics = ReconcileMetrics(metrics.registry)
    health.serving_trusted = lambda: reconcile_metrics.serving_verdict
    task = functools.partial(runner.run_reconciler, cluster, settings, metrics=reconcile_metrics)
    return [task], f"on ({cluster.describe}, namespace {settings.namespace})"
