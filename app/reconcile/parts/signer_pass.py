"""The pod-certificate signer's pass (the native path, docs/reconcile.md "Pod certificates"): publish the
CA set as the ClusterTrustBundle, answer the pending pod certificate requests; or, between full passes,
only the requests, signed by the CA set as stored.

It holds no state of its own (what the cluster serves is signer.NativeApis's, handed to it) and is
handed the API, the settings, the metrics and the writer's guard; the CA set it signs with and the
pods it checks requests against are handed to each call by the pass."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from tls_injector.kube import KubeApi
from tls_injector.pki import CaSet
from tls_injector.reconcile.core.inputs import Observed
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.native import podcerts, signer
from tls_injector.reconcile.parts.state import PassReport, ReconcileSettings


class PodCertificateSigner:
    """The ClusterTrustBundle and the answers to pod certificate requests."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, metrics: ReconcileMetrics, native: signer.NativeApis,
                 *, guard: Callable[[], None]) -> None:
        self._api = api
        self._settings = settings
        self._metrics = metrics
        self._native = native
        self._guard = guard
        self._held: signer.Held | None = None

    def use_cache(self, held: signer.Held | None) -> None:
        """The running loop's cache of pending requests: read instead of listing while it holds them."""
        self._held = held

    def observe(self) -> signer.NativeView | None:
        """The bundle and the requests, when the cluster serves pod certificates (None when not)."""
        return signer.observe(self._api, self._native, self._held)

    def converge(self, native: signer.NativeView, cas: CaSet, observed: Observed, report: PassReport,
                 now: datetime) -> None:
        """The pod-certificate signer: publish the CA set as the ClusterTrustBundle, then answer the pending
        pod certificate requests (they wait, pending, while no CA may sign)."""
        try:
            report.writes["update" if native.bundle else "create"] += signer.publish(
                self._api, native, cas, now=now, guard=self._guard)
        except ValueError as e:  # a bundle of our name that is not ours
            report.conflicts.append(str(e))
        self._answer_requests(native, cas, observed, report, now)

    def _answer_requests(self, native: signer.NativeView, cas: CaSet, observed: Observed, report: PassReport,
                         now: datetime) -> None:
        signing = cas.signer()
        if signing is None:
            return
        pods = {(p["metadata"].get("namespace") or "", p["metadata"]["name"]): p for p in observed.pods}
        outcome = signer.sign(self._api, native, signer=signing, pods=pods, enabled=observed.enabled, now=now,
                              guard=self._guard, cluster_domain=self._settings.cluster_domain)
        report.writes["update"] += outcome.writes
        report.reasons["pod-certificate:issued"] += outcome.issued
        report.reasons["pod-certificate:denied"] += outcome.denied
        for verdict, count in outcome.verdicts.items():
            self._metrics.pod_certificates.labels(verdict).inc(count)
        report.failed += outcome.failed

    def requests_only(self, report: PassReport, now: datetime, *, cas: Callable[[], CaSet],
                      observed: Callable[[], Observed]) -> None:
        """Only the pending requests of our signer, if any: `cas` the CA set as stored, `observed` the pods
        (each read only when a request of ours waits)."""
        native = signer.pending(self._api, self._native, self._held)  # no bundle: this pass does not publish
        if native is None or not any(podcerts.is_ours(r) for r in native.requests):
            return
        self._answer_requests(native, cas(), observed(), report, now)
