"""The webhook's own pass: its serving certificate, the caBundle of both its configurations, and whether
what it serves is trusted by them (docs/reconcile.md, "The webhook's certificate").

A part of its own, holding no state: it is handed the API, the settings, the metrics, the writer (its
objects' writes) and the CA keeper (its CA set's step)."""

from __future__ import annotations

import logging
from datetime import datetime

from tls_injector.kube import SECRETS, KubeApi, Resource
from tls_injector.pki import load_certificates
from tls_injector.reconcile.core.inputs import Signing
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Obj
from tls_injector.reconcile.parts.served import fetch_served
from tls_injector.reconcile.parts.state import PassReport, ReconcileSettings, read_optional
from tls_injector.reconcile.parts.trust import CaKeeper
from tls_injector.reconcile.parts.webhook_plan import (
    WEBHOOK_KINDS,
    WebhookSettings,
    bundles_in_use,
    configurations_trusting,
    leaves_in_use,
    webhook_items,
)
from tls_injector.reconcile.parts.writes import Writer

log = logging.getLogger("tls_injector.reconcile")


class WebhookPass:
    """The webhook's certificate and caBundles, as the last of a full pass or alone (`bootstrap`)."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, metrics: ReconcileMetrics, writer: Writer,
                 keeper: CaKeeper) -> None:
        self._api = api
        self._settings = settings
        self._metrics = metrics
        self._writer = writer
        self._keeper = keeper

    def _read(self, resource: Resource, name: str) -> Obj | None:
        return read_optional(self._api, resource, name, self._settings.namespace)

    def converge(self, ws: WebhookSettings, report: PassReport,
                         now: datetime) -> dict[tuple[str, str], Obj]:
        """The webhook's serving Secret and the caBundle of both configurations (see webhook_plan);
        returns the configurations as stored at the end, keyed by (kind, name)."""
        configs: dict[tuple[str, str], Obj] = {}
        for resource in WEBHOOK_KINDS:
            for name in ws.configurations:
                found = self._read(resource, name)
                if found is not None:
                    configs[resource.kind, name] = found
        if not configs:
            log.warning("no webhook configuration found; only the serving certificate is kept",
                        extra={"configurations": list(ws.configurations)})
        serving = self._read(SECRETS, ws.secret_name)
        step = self._keeper.step_ca(ws.ca, bundles=bundles_in_use(configs.values()), leaves=leaves_in_use(serving),
                                     user_ca=None, now=now, report=report)
        stored = dict(configs)
        for item in webhook_items(ws, self._settings.namespace, configs, Signing.of(step.cas, now=now)):
            existing = serving if item.resource is SECRETS else configs.get((item.resource.kind, item.name))
            result = self._writer.converge_cached(item, existing, report, now)
            if item.resource is not SECRETS and result is not None:
                stored[item.resource.kind, item.name] = result
        return stored

    def served_verdict(self, ws: WebhookSettings, configs: dict[tuple[str, str], Obj], now: datetime) -> bool | None:
        """Does every caBundle trust the certificate the webhook serves now? One TLS handshake per pass
        (no API call: the configurations were just read); None when not checked or unreachable."""
        self._metrics.serving_trusted.clear()
        if ws.served_address is None or not configs:
            return None
        dns_name = f"{ws.service}.{self._settings.namespace}.svc"
        served = fetch_served(*ws.served_address, server_name=dns_name, explicit=True)
        chain = load_certificates(served.chain_pem)
        if not chain:
            log.warning("cannot check the served certificate", extra={"address": served.address, "error": served.error})
            return None
        trusted = configurations_trusting(configs, chain, default_dns=dns_name, now=now)
        for name, verdict in trusted.items():
            self._metrics.serving_trusted.labels(name).set(int(verdict))
        if not all(trusted.values()):
            log.error("a caBundle does not trust the certificate the webhook serves: admission calls fail",
                      extra={"address": served.address, "configurations": [n for n, v in trusted.items() if not v]})
        return all(trusted.values())
