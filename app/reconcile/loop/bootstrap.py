"""`tls-injector bootstrap`: the webhook's own TLS, from a Job, before the webhook pods can start.

The work itself is the reconciler's webhook self-care (app/reconcile/loop/webhook.py): the webhook CA set,
the serving Secret, and `caBundle` in every entry of both configurations, stepped by the same trust
state machine the reconcile loop uses, so the Job and the running reconciler never disagree. This module
adds what a one-shot Job needs on top: a check, as the API server will make it, that every entry's
caBundle verifies the serving certificate for the Service's name, and a clear list of what is wrong
when it does not (a missing configuration is an error here, where the loop only logs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tls_injector.kube import (
    MUTATING_WEBHOOKS,
    SECRETS,
    VALIDATING_WEBHOOKS,
    ClusterConfig,
    KubeApi,
    KubeError,
    NotFound,
    Obj,
    Resource,
    api_client,
)
from tls_injector.pki import load_certificates
from tls_injector.reconcile.core.objects import secret_data
from tls_injector.reconcile.loop.webhook import ensure_webhook_certificate
from tls_injector.reconcile.parts.reconciler import PassReport, ReconcileSettings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings, entry_trust_problem


@dataclass(frozen=True)
class BootstrapSettings:
    namespace: str
    webhook: WebhookSettings


@dataclass(frozen=True)
class BootstrapResult:
    report: PassReport
    problems: tuple[str, ...]  # why the API server would not (yet) trust the webhook; empty when it will

    @property
    def ok(self) -> bool:
        return self.report.converged and not self.problems


def bootstrap_settings(settings: ReconcileSettings) -> BootstrapSettings | None:
    """From the flags `serve` and `reconcile` share; None when no webhook configuration is named."""
    return BootstrapSettings(settings.namespace, settings.webhook) if settings.webhook else None


def connect(cluster: ClusterConfig) -> KubeApi:
    return KubeApi(api_client(cluster), timeout=cluster.timeout)


def bootstrap(api: KubeApi, settings: BootstrapSettings, *, now: datetime) -> BootstrapResult:
    """Converge the webhook's TLS once, then check the outcome the way the API server will use it."""
    ws = settings.webhook
    report = ensure_webhook_certificate(api, namespace=settings.namespace, now=now, service=ws.service,
                                        secret_name=ws.secret_name, webhook_names=ws.configurations,
                                        cluster_domain=ws.cluster_domain)
    if not report.converged:
        return BootstrapResult(report, ())
    try:
        return BootstrapResult(report, tuple(trust_problems(api, settings, now=now)))
    except KubeError as e:  # the writes worked but the read-back did not: say so, never a traceback
        return BootstrapResult(report, (f"checking the result failed: {type(e).__name__}: {e}",))


def service_dns_name(settings: BootstrapSettings) -> str:
    """The name the API server dials for a `clientConfig.service` reference (and checks the cert for)."""
    return f"{settings.webhook.service}.{settings.namespace}.svc"


def trust_problems(api: KubeApi, settings: BootstrapSettings, *, now: datetime) -> list[str]:
    secret = _optional(api, SECRETS, settings.webhook.secret_name, namespace=settings.namespace)
    chain = load_certificates(secret_data(secret).get("tls.crt", b""))
    if not chain:
        return [f"Secret {settings.namespace}/{settings.webhook.secret_name} holds no serving certificate"]
    problems: list[str] = []
    for name in settings.webhook.configurations:
        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            config = _optional(api, resource, name)
            if config is None:  # both ship together: one missing means manifests/ was not (fully) applied
                problems.append(f"no {resource.kind} named {name!r}: apply manifests/ first, then run this again")
            else:
                problems += _entry_problems(config, chain, settings, now)
    return problems


def _entry_problems(config: Obj, chain: Sequence[Any], settings: BootstrapSettings, now: datetime) -> list[str]:
    problems = []
    for entry in config.get("webhooks") or []:
        problem = entry_trust_problem(entry, chain, dns_name=service_dns_name(settings), now=now)
        if problem:
            problems.append(f"{config['kind']} {config['metadata']['name']} entry {entry.get('name')}: {problem}")
    return problems


def _optional(api: KubeApi, resource: Resource, name: str, *, namespace: str | None = None) -> Obj | None:
    try:
        return api.get(resource, name, namespace=namespace)
    except NotFound:
        return None
