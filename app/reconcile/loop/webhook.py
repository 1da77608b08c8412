"""Webhook self-care for callers outside the reconcile loop (`tls-injector bootstrap`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tls_injector import names
from tls_injector.kube import KubeApi
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

__all__ = ["PassReport", "WebhookSettings", "ensure_webhook_certificate"]


def ensure_webhook_certificate(
    api: KubeApi,
    *,
    namespace: str,
    now: datetime,
    service: str = names.WEBHOOK_SERVICE,
    secret_name: str = names.WEBHOOK_SECRET,
    webhook_names: Sequence[str] = (names.WEBHOOK_CONFIGURATION,),
    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN,
    metrics: ReconcileMetrics | None = None,
) -> PassReport:
    """Create or renew the serving certificate Secret (`kubernetes.io/tls` in `namespace`, for Service
    `service`) under the webhook CA (Secret tls-injector-webhook-ca, created on first use), and put the CA
    bundle in `clientConfig.caBundle` of every entry of the Mutating/ValidatingWebhookConfigurations named
    `webhook_names`. Idempotent: a second call writes nothing. `report.converged` says whether it all
    worked; `report.aborted` / `report.failed` say why not."""
    ws = WebhookSettings(service=service, secret_name=secret_name, configurations=tuple(webhook_names),
                         cluster_domain=cluster_domain)
    reconciler = Reconciler(api, ReconcileSettings(namespace=namespace, cluster_domain=cluster_domain, webhook=ws),
                            metrics=metrics, clock=lambda: now)
    return reconciler.run_webhook_pass(ws)
