"""The long-running loop: lead, keep the cache, reconcile what a change touches, and the whole cluster at
start, on a CA event and at least every 10 minutes.

The cache (app/reconcile/loop/cache.py) lists each resource a pass reads once, then follows its watch; a pass
reads the cache, never lists. A change queues the namespace it concerns (a workload, pod, Service, or
our Secret or bundle there), and a keyed pass converges the queued namespaces alone, on the CA sets as the
last full pass stepped them. A full pass reads the whole cache: at start, when a change concerns the
whole cluster (a CA's Secret, our other Secrets and ConfigMaps, the user's CA), when a CA step's time
comes, and at the resync, which also brings each certificate's renewal. A write that failed is retried by
a keyed pass of its namespace when its backoff ends.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tls_injector import names
from tls_injector.kube import (
    CONFIG_MAPS,
    SECRETS,
    Gone,
    KubeApi,
    KubeError,
    LeaderElector,
    Resource,
    pod_certificate_requests,
)
from tls_injector.kube.lease import RETRY_PERIOD
from tls_injector.names import MANAGED_BY_LABEL, MANAGER
from tls_injector.reconcile.core.events import ISSUED_WINDOW, IssuedTally, Outbox
from tls_injector.reconcile.core.keypool import KeyPool
from tls_injector.reconcile.loop.cache import CLUSTER, ClusterCache
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler
from tls_injector.reconcile.parts.status import Status

log = logging.getLogger("tls_injector.controller")
# The issue's resync period: long enough to cost little on a big cluster, short enough that a dropped
# watch or a certificate crossing its renewal window is handled within minutes.
RESYNC_SECONDS = 600.0
# Changes come in bursts (a rollout touches many objects): wait this long after one before a pass.
DEBOUNCE_SECONDS = 1.0
# After a failed pass, retry soon but not in a tight loop against a struggling API server.
RETRY_SECONDS = 10.0
# The floor between the end of one full pass and the start of the next, whatever calls for one: at least
# this long, and at least as long as the last pass took. A full pass decides on the whole cluster (from the
# cache: seconds of CPU at 100,000 workloads); without a floor, anyone who can change one of our Secrets or
# ConfigMaps every second would have it run every second. With it the loop spends at most half its time in
# full passes; a change in a namespace never waits for one (a keyed pass takes it).
MIN_PASS_GAP_SECONDS = 5.0
# A lease round is at most two API calls of up to 30 s each (tls_injector.kube.api's timeout) plus the 2 s wait
# (the leader's renewal on its last write, when refused at once with a 409 or 404, comes before them):
# a loop that has not come round in 90 s is stuck, not slow. (An unreachable API server does not count
# as stuck: the round fails fast or times out and comes round again, and a restart would not help.)
STUCK_AFTER_SECONDS = 90.0

# After the first change of a burst, wait this long for more before a keyed pass: a rollout's objects
# come within a fraction of a second of each other, and a new workload still has its Secret within ~1 s.
KEY_DEBOUNCE_SECONDS = 0.25


def _on_stop(stop: threading.Event, wake: threading.Event) -> None:
    """The loop waits on `wake`, which `stop` must end at once too."""
    stop.wait()
    wake.set()


def _is_bundle(obj: dict[str, object]) -> bool:
    meta = obj.get("metadata")
    return isinstance(meta, dict) and meta.get("name") == names.TRUST_BUNDLE_CONFIGMAP


@dataclass
class Controller:
    api: KubeApi
    reconciler: Reconciler
    elector: LeaderElector | None = None
    resync_seconds: float = RESYNC_SECONDS
    debounce_seconds: float = DEBOUNCE_SECONDS
    watch_timeout_seconds: int = 300
    min_pass_gap_seconds: float = MIN_PASS_GAP_SECONDS
    # At most one CertificatesIssued Event per namespace in this long (events.ISSUED_WINDOW; shorter in tests).
    issued_window_seconds: float = ISSUED_WINDOW
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    # Monotonic time the loop last came round (lease round or loop turn); None before run() starts.
    heartbeat: float | None = None
    passes: int = 0  # full passes run, for tests and logs
    keyed_passes: int = 0  # keyed passes run (of the namespaces a change touched)
    _keys: set[str] = field(default_factory=set)  # queued namespaces; CLUSTER for a full pass
    _later: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, namespace) to retry
    # Namespaces the last pass left over (budget.py, keypool.py), decided after the namespaces queued
    # meanwhile; `_prompt` those whose budget was spent, queued again and taken at once (no debounce: nothing
    # to gather); `_for_keys` those that wait for a key, queued again (debounced) when one is made.
    _continuing: set[str] = field(default_factory=set)
    _prompt: set[str] = field(default_factory=set)
    _for_keys: set[str] = field(default_factory=set)
    _pool: KeyPool | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event | None = None
    _outbox: Outbox | None = None  # the Events' outbox of the running loop, closed when it stops

    def alive(self, now: float | None = None) -> bool:
        """For a liveness probe: running, and came round within STUCK_AFTER_SECONDS."""
        beat = self.heartbeat
        return beat is not None and (time.monotonic() if now is None else now) - beat < STUCK_AFTER_SECONDS

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set: renew the lease every 2 s; a full pass when due, a keyed one when queued."""
        self.heartbeat = time.monotonic()
        self._wake = wake = threading.Event()
        threading.Thread(target=_on_stop, args=(stop, wake), daemon=True, name="stop-wakes").start()
        cache = self._start_watches(stop)
        self.reconciler.keys = self._pool = KeyPool(on_ready=self._key_made)
        threading.Thread(target=self._pool.run, args=(stop,), daemon=True, name="keys").start()
        sign = threading.Event()  # only a pod certificate request changed: the signer alone is enough
        self._follow_pod_certificates(cache, sign, stop)
        if self.elector:
            self.reconciler.metrics.follow(self._leading)
            # Renewal runs beside the passes: a long pass must not let the lease lapse.
            threading.Thread(target=self._lead, args=(self.elector, stop), daemon=True, name="lease").start()
        due = 0.0  # monotonic time of the next full pass; 0 = at once
        floor = 0.0  # no full pass starts before this monotonic time
        clock = time.monotonic
        while not stop.is_set():
            if self.elector is None:
                self.heartbeat = clock()
            wake.clear()
            if not self._leading():
                due = 0.0  # whoever leads next starts with a full pass
                self.reconciler.forget()  # what it saw is the leader's to say now (cheap: drops references)
            elif not cache.synced():
                pass  # the first lists are still under way: nothing to decide on yet
            else:
                cache.refill_missing()
                if sign.is_set() and due:
                    stop.wait(self.debounce_seconds)
                    sign.clear()
                    self._signer_pass()
                if self._take(CLUSTER):
                    stop.wait(self.debounce_seconds)
                    due = max(floor, 0.0)
                if clock() >= due:
                    sign.clear()  # a full pass answers the requests too
                    self._clear_keys()  # a full pass reads every namespace's changes so far
                    started = clock()
                    due = clock() + self._pass_and_next_delay()
                    self.passes += 1
                    floor = clock() + max(self.min_pass_gap_seconds, clock() - started)
                elif self._keys_ready(clock()):
                    if not self._only_continuing():
                        stop.wait(KEY_DEBOUNCE_SECONDS)
                    if self._keyed_pass(clock()) is None:
                        due = max(floor, 0.0)  # only a full pass can decide what was queued
                    continue
            waits = [RETRY_PERIOD.total_seconds(), *([due - clock()] if due else []),
                     *([self._later[0][0] - clock()] if self._later else [])]
            wake.wait(max(0.02, min(waits)) if self._leading() and cache.synced() else 0.05)
        self._stopped()

    def _stopped(self) -> None:
        self.heartbeat = None  # a probe must see it at once, not 90 s later
        if self._outbox is not None:
            self._outbox.close()  # its thread must not post what it holds once the loop has stopped

    def _start_watches(self, stop: threading.Event) -> ClusterCache:
        """The cache's informers, and the watches that only tell: our other ConfigMaps and the user's CAs."""
        cache = ClusterCache(self.api, on_key=self._queue)
        self._outbox = Outbox(self.api, tally=IssuedTally(self.issued_window_seconds))
        self.reconciler.attach(cache, self._outbox)
        threading.Thread(target=cache.run, args=(stop, self.watch_timeout_seconds), daemon=True,
                         name="cache").start()
        # Our ConfigMaps other than the bundles (a member's report, a hub's record): only their change is told.
        threading.Thread(target=self._watch, args=(CONFIG_MAPS, f"{MANAGED_BY_LABEL}={MANAGER}", stop),
                         kwargs={"on_event": lambda o: None if _is_bundle(o) else self._queue(CLUSTER)},
                         daemon=True, name="watch-configmaps-ours").start()
        self._watch_user_ca(stop)
        return cache

    def _queue(self, key: str) -> None:
        """A change concerns namespace `key` (CLUSTER: all of them): queued, and the loop woken."""
        with self._lock:
            self._keys.add(key)
        if self._wake is not None:
            self._wake.set()

    def _take(self, key: str) -> bool:
        with self._lock:
            found = key in self._keys
            self._keys.discard(key)
            return found

    def _clear_keys(self) -> None:
        with self._lock:
            self._keys = set()  # retries still pending (`_later`) stay

    def _only_continuing(self) -> bool:
        with self._lock:
            return self._keys <= self._prompt

    def _key_made(self) -> None:
        """A key was made ahead (keypool.py): the namespaces waiting for one are queued again."""
        with self._lock:
            if not self._for_keys:
                return
            self._continuing |= self._for_keys
            self._keys |= self._for_keys
            self._for_keys = set()
        if self._wake is not None:
            self._wake.set()

    def _keys_ready(self, now: float) -> bool:
        """Anything queued, or a retry whose time came (moved to the queue)."""
        with self._lock:
            while self._later and self._later[0][0] <= now:
                self._keys.add(heapq.heappop(self._later)[1])
            return bool(self._keys)

    def _keyed_pass(self, now: float) -> PassReport | None:
        """The queued namespaces (CLUSTER excepted: the loop takes it first); None when a full pass must
        decide instead. A namespace whose pass failed comes back after RETRY_SECONDS; one whose write
        failed, when its backoff ends."""
        with self._lock:
            keys, self._keys = self._keys - {CLUSTER}, self._keys & {CLUSTER}
            last, self._continuing, self._prompt = self._continuing & keys, self._continuing - keys, self._prompt - keys
        if not keys:
            return PassReport()
        try:
            report = self.reconciler.run_namespaces_pass(keys, last=last)
        except Exception:
            log.exception("keyed pass crashed; the namespaces are tried again")
            report = PassReport(aborted="crashed")
        if report is None:
            return None
        self.keyed_passes += 1
        self._after_writes(report)
        self._retry(keys, now, aborted=bool(report.aborted))
        return report

    def _retry(self, keys: set[str] | None, now: float, *, aborted: bool = False) -> None:
        """Queue `keys` again after RETRY_SECONDS when their pass failed, and each namespace whose write
        failed when its backoff ends (of `keys`, or of any namespace after a full pass). Only a time still
        to come: a backoff entry whose object left the plan stays past its time, and must not queue its
        namespace at once, again and again."""
        retries: dict[str, float] = {ns: now + RETRY_SECONDS for ns in keys or ()} if aborted else {}
        wall = self.reconciler.clock()
        for ns, retry_at in self.reconciler.retries(keys).items():
            if retry_at > wall:
                at = now + (retry_at - wall).total_seconds()
                retries[ns] = min(retries.get(ns, at), at)
        with self._lock:
            for ns, at in retries.items():
                heapq.heappush(self._later, (at, ns))

    def _pass_and_next_delay(self) -> float:
        """A pass; the loop must outlive anything one pass runs into, so a bug is logged and retried."""
        try:
            report = self.reconciler.run_pass()
        except Exception:
            log.exception("reconcile pass crashed; retrying")
            return RETRY_SECONDS
        self._after_writes(report)
        self._retry(None, time.monotonic())
        return next_pass_delay(report, now=self.reconciler.clock(), resync_seconds=self.resync_seconds)

    def _after_writes(self, report: PassReport) -> None:
        """Mid-rotation, a pass's writes are facts the next CA step waits on: a full pass (at the floor). The
        namespaces the pass left over (their budget spent) are queued again, as continuing."""
        if report.write_count and self.reconciler.rotating():
            self._queue(CLUSTER)
        with self._lock:
            self._continuing |= report.deferred
            self._prompt |= report.deferred
            self._keys |= report.deferred
            self._for_keys |= report.for_keys - report.deferred
        if report.for_keys and self._pool is not None and self._pool.has_ready():
            self._key_made()  # made while the pass went on: no later key need come to queue them

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
        leading = False
        while not stop.is_set():
            now = self.clock()
            since = elector.since_renewal(now)
            # The renew deadline passed before this round: meanwhile a pass that wrote stopped (Writer.guard)
            # and the loop may have forgotten what it held, even if this round takes the Lease back at once.
            lapsed = leading and not elector.is_leader(now)
            leads = elector.try_lead(now)  # tls_injector_leader reads is_leader at each scrape (follow)
            if lapsed or (leading and not leads):
                log.warning("leader lease lost", extra={
                    "since_renewal_seconds": None if since is None else round(since.total_seconds(), 1),
                    "round_seconds": round((self.clock() - now).total_seconds(), 1), "leading_again": leads})
            elif leads and not leading:
                log.info("leader lease taken", extra={"identity": elector.identity})
            leading = leads
            if not stop.is_set():
                self.heartbeat = time.monotonic()
            stop.wait(RETRY_PERIOD.total_seconds())

    def _follow_pod_certificates(self, cache: ClusterCache, wake: threading.Event, stop: threading.Event) -> None:
        """Requests to our signer wake a signer pass at once: their pod does not start until one is answered.
        They are held in the cache while pending, so no pass lists them. The API version is found at start;
        a cluster upgraded to serve it is picked up at the next restart (until then a full pass lists)."""
        try:
            version = self.reconciler.native.version()
        except KubeError as e:
            log.warning("pod certificate discovery failed; requests are answered at each resync",
                        extra={"error": str(e)})
            return
        if version is not None:
            informer = cache.follow_requests(pod_certificate_requests(version), on_request=lambda: self._signal(wake))
            threading.Thread(target=informer.run, args=(stop, self.watch_timeout_seconds), daemon=True,
                             name="watch-podcertificaterequests").start()

    def _watch_user_ca(self, stop: threading.Event) -> None:
        """The Secrets of the user's own CAs (`--ca-secret`, `--client-ca-secret`) are not ours, so no label
        selects them: each watched by name, so that a replaced CA starts rotating in at once, not at the
        next resync."""
        settings = self.reconciler.settings
        for role, name in (("serving", settings.user_ca_secret), ("client", settings.user_client_ca_secret)):
            if name:
                selector = f"metadata.namespace={settings.namespace},metadata.name={name}"
                threading.Thread(target=self._watch, args=(SECRETS, None, stop), daemon=True,
                                 kwargs={"field_selector": selector, "on_event": lambda _: self._queue(CLUSTER)},
                                 name=f"watch-user-{role}-ca").start()

    def _signal(self, event: threading.Event) -> None:
        event.set()
        if self._wake is not None:
            self._wake.set()

    def _watch(self, resource: Resource, selector: str | None, stop: threading.Event, *,
               on_event: Callable[[dict[str, object]], None], field_selector: str | None = None) -> None:
        """Only told, not cached: `on_event` for each change (a relist after 410 Gone counts as one)."""
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    version = self.api.current_version(resource, label_selector=selector,
                                                       field_selector=field_selector)
                for event in self.api.watch(resource, resource_version=version, label_selector=selector,
                                            field_selector=field_selector, timeout_seconds=self.watch_timeout_seconds):
                    version = event.object.get("metadata", {}).get("resourceVersion") or version
                    if event.type != "BOOKMARK":
                        on_event(event.object)
                    if stop.is_set():
                        return
            except Gone:
                version = ""  # too old: from now on, and a full pass (something may have been missed)
                on_event({})
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
