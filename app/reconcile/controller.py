"""The long-running loop: lead, watch, reconcile on change and at least every 10 minutes.

Watches only what can change the plan: workloads (their pod templates cannot be selected server-side),
Pods, opted-in Namespaces, and our own Secrets and ConfigMaps selected by the ownership label, so the
process never holds every Secret of the cluster. Pods are watched whole, because a bare pod or a pod of
an unknown controller in an opted-in namespace needs no label, but only those (not run by a listed
kind, not opted out) wake a pass: the pods of Deployments and the like are covered by their templates.
Events only wake the loop; every pass re-reads, so a missed or reordered event costs nothing but
latency, and the resync catches anything a watch dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from app import names
from app.kube import (
    CONFIG_MAPS,
    CRON_JOBS,
    DAEMON_SETS,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    PODS,
    REPLICA_SETS,
    SECRETS,
    SERVICES,
    STATEFUL_SETS,
    Gone,
    KubeApi,
    KubeError,
    LeaderElector,
    Resource,
    pod_certificate_requests,
)
from app.kube.lease import RETRY_PERIOD
from app.names import MANAGED_BY_LABEL, MANAGER
from app.reconcile.discover import pod_may_need_a_secret
from app.reconcile.reconciler import PassReport, Reconciler
from app.reconcile.status import Status

log = logging.getLogger("tls_injector.controller")
# The resync period: long enough to cost little on a big cluster, short enough that a dropped
# watch or a certificate crossing its renewal window is handled within minutes.
RESYNC_SECONDS = 600.0
# Changes come in bursts (a rollout touches many objects): wait this long after one before a pass.
DEBOUNCE_SECONDS = 1.0
# After a failed pass, retry soon but not in a tight loop against a struggling API server.
RETRY_SECONDS = 10.0
# The floor between the end of one full pass and the start of the next, whatever wakes the loop: at least
# this long, and at least as long as the last pass took. A pass lists the whole cluster; without a floor,
# anyone who can change an object every second (any tenant) makes the reconciler list everything every
# second. With it the loop spends at most half its time in passes, and a change waits at most one pass.
MIN_PASS_GAP_SECONDS = 5.0
# A lease round is at most two API calls of up to 30 s each (app.kube.api's timeout) plus the 2 s wait:
# a loop that has not come round in 90 s is stuck, not slow. (An unreachable API server does not count
# as stuck: the round fails fast or times out and comes round again, and a restart would not help.)
STUCK_AFTER_SECONDS = 90.0

WATCHED: tuple[tuple[Resource, str | None], ...] = (
    (DEPLOYMENTS, None),
    (STATEFUL_SETS, None),
    (DAEMON_SETS, None),
    (REPLICA_SETS, None),
    (JOBS, None),
    (CRON_JOBS, None),
    (NAMESPACES, f"{names.INJECT_LABEL}={names.NAMESPACE_OPT_IN}"),
    (PODS, None),
    (SERVICES, None),  # a Service added or changed may name a workload's pods: its certificate is re-issued
    (SECRETS, f"{MANAGED_BY_LABEL}={MANAGER}"),
    (CONFIG_MAPS, f"{MANAGED_BY_LABEL}={MANAGER}"),
)
# Which events of a watched kind wake a pass (all, for the kinds not named here).
WAKES: Mapping[str, Callable[[dict[str, object]], bool]] = {PODS.kind: pod_may_need_a_secret}


@dataclass
class Controller:
    api: KubeApi
    reconciler: Reconciler
    elector: LeaderElector | None = None
    resync_seconds: float = RESYNC_SECONDS
    debounce_seconds: float = DEBOUNCE_SECONDS
    watch_timeout_seconds: int = 300
    min_pass_gap_seconds: float = MIN_PASS_GAP_SECONDS
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    # Monotonic time the loop last came round (lease round or loop turn); None before run() starts.
    heartbeat: float | None = None
    passes: int = 0  # full passes run, for tests and logs

    def alive(self, now: float | None = None) -> bool:
        """For a liveness probe: running, and came round within STUCK_AFTER_SECONDS."""
        beat = self.heartbeat
        return beat is not None and (time.monotonic() if now is None else now) - beat < STUCK_AFTER_SECONDS

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set: renew the lease every 2 s, reconcile when woken or when the resync is due."""
        self.heartbeat = time.monotonic()
        wake = threading.Event()
        for resource, selector in WATCHED:
            threading.Thread(target=self._watch, args=(resource, selector, wake, stop), daemon=True,
                             name=f"watch-{resource.plural}").start()
        sign = threading.Event()  # only a pod certificate request changed: the signer alone is enough
        self._watch_pod_certificates(sign, stop)
        self._watch_user_ca(wake, stop)
        if self.elector:
            self.reconciler.metrics.follow(self._leading)
            # Renewal runs beside the passes: a long pass must not let the lease lapse.
            threading.Thread(target=self._lead, args=(self.elector, stop), daemon=True, name="lease").start()
        due = 0.0  # monotonic time of the next pass; 0 = at once
        floor = 0.0  # no full pass starts before this monotonic time
        clock = time.monotonic
        while not stop.is_set():
            if self.elector is None:
                self.heartbeat = clock()
            if self._leading():
                if sign.is_set() and not wake.is_set() and due:
                    stop.wait(self.debounce_seconds)
                    sign.clear()
                    self._signer_pass()
                if wake.is_set():
                    stop.wait(self.debounce_seconds)
                    wake.clear()
                    due = max(floor, 0.0)
                if clock() >= due:
                    sign.clear()  # a full pass answers the requests too
                    started = clock()
                    due = clock() + self._pass_and_next_delay()
                    self.passes += 1
                    floor = clock() + max(self.min_pass_gap_seconds, clock() - started)
            else:
                due = 0.0  # whoever leads next starts with a full pass
                self.reconciler.forget()  # what it saw is the leader's to say now (cheap: drops references)
            stop.wait(min(RETRY_PERIOD.total_seconds(), max(0.05, due - clock())) if due else 0.05)
        self.heartbeat = None  # stopped: a probe must see it at once, not 90 s later

    def _pass_and_next_delay(self) -> float:
        """A pass; the loop must outlive anything one pass runs into, so a bug is logged and retried."""
        try:
            report = self.reconciler.run_pass()
        except Exception:
            log.exception("reconcile pass crashed; retrying")
            return RETRY_SECONDS
        return next_pass_delay(report, now=self.reconciler.clock(), resync_seconds=self.resync_seconds)

    def _signer_pass(self) -> None:
        try:
            self.reconciler.run_signer_pass()
        except Exception:
            log.exception("signer pass crashed; the next full pass answers the requests")

    def snapshot(self) -> Status | None:
        """What the last pass saw, for the status API and page: None unless this replica leads now (a
        replica that lost the Lease answers 503, as one that never held it, not its last pass with 200)."""
        return self.reconciler.status if self._leading() else None

    def _leading(self) -> bool:
        return self.elector is None or self.elector.is_leader(self.clock())

    def _lead(self, elector: LeaderElector, stop: threading.Event) -> None:
        while not stop.is_set():
            elector.try_lead(self.clock())  # tls_injector_leader reads is_leader at each scrape (follow)
            if not stop.is_set():
                self.heartbeat = time.monotonic()
            stop.wait(RETRY_PERIOD.total_seconds())

    def _watch_pod_certificates(self, wake: threading.Event, stop: threading.Event) -> None:
        """Requests to our signer wake a signer pass at once: their pod does not start until one is answered.
        The API version is found at start; a cluster upgraded to serve it is picked up at the next restart."""
        try:
            version = self.reconciler.native.version()
        except KubeError as e:
            log.warning("pod certificate discovery failed; requests are answered at each resync",
                        extra={"error": str(e)})
            return
        if version is not None:
            threading.Thread(target=self._watch, args=(pod_certificate_requests(version), None, wake, stop),
                             kwargs={"field_selector": f"spec.signerName={names.SIGNER_NAME}"}, daemon=True,
                             name="watch-podcertificaterequests").start()

    def _watch_user_ca(self, wake: threading.Event, stop: threading.Event) -> None:
        """The Secrets of the user's own CAs (`--ca-secret`, `--client-ca-secret`) are not ours, so no label
        selects them: each watched by name, so that a replaced CA starts rotating in at once, not at the
        next resync."""
        settings = self.reconciler.settings
        for role, name in (("serving", settings.user_ca_secret), ("client", settings.user_client_ca_secret)):
            if name:
                selector = f"metadata.namespace={settings.namespace},metadata.name={name}"
                threading.Thread(target=self._watch, args=(SECRETS, None, wake, stop), daemon=True,
                                 kwargs={"field_selector": selector}, name=f"watch-user-{role}-ca").start()

    def _watch(self, resource: Resource, selector: str | None, wake: threading.Event, stop: threading.Event, *,
               field_selector: str | None = None) -> None:
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    version = self.api.current_version(resource, label_selector=selector,
                                                       field_selector=field_selector)
                for event in self.api.watch(resource, resource_version=version, label_selector=selector,
                                            field_selector=field_selector, timeout_seconds=self.watch_timeout_seconds):
                    version = event.object.get("metadata", {}).get("resourceVersion") or version
                    if event.type != "BOOKMARK" and WAKES.get(resource.kind, _always)(event.object):
                        wake.set()
                    if stop.is_set():
                        return
            except Gone:
                version = ""  # too old: list again (and reconcile, something may have been missed)
                wake.set()
            except KubeError as e:
                log.warning("watch failed; retrying", extra={"resource": resource.plural, "error": str(e)})
                stop.wait(RETRY_SECONDS)




def next_pass_delay(report: PassReport, *, now: datetime, resync_seconds: float) -> float:
    """Seconds until the next pass when nothing wakes the loop earlier.

    A CA step that waits only for time (a settle ending) gets a pass at that time instead of at the
    resync, so a rotation, or certificates waiting for a replaced user CA, do not sit idle for up to 10
    minutes. Never sooner than RETRY_SECONDS: a step due at once follows a CA write, which wakes the
    loop through the watch on our Secrets anyway.
    """
    if report.aborted:
        return RETRY_SECONDS
    if report.next_ca_step is None:
        return resync_seconds
    return min(resync_seconds, max(RETRY_SECONDS, (report.next_ca_step - now).total_seconds()))


def _always(_: dict[str, object]) -> bool:
    return True
