"""The writer: one object at a time, decided, written with its preconditions, re-read on a 409, backed
off when its writes keep failing, writes sent ahead while the next objects are decided; and the
workloads concerned told (through the announcer: Events once while a condition lasts; the log and the
report at every pass).

It holds only its own state (the backoff) and is handed what it uses: the API, the metrics, the
announcer, whether this replica may write, and in the loop the cache its writes go into at once."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from tls_injector.kube import SECRETS, Conflict, KubeApi, KubeError, NotFound, Resource, Unavailable
from tls_injector.reconcile.core.budget import TurnBudget
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Deferred, Item, Obj, Refused, Waiting, Write
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.state import NotLeader, PassReport

log = logging.getLogger("tls_injector.reconcile")
# Three tries per object: a 409 means someone wrote in between; three in a row means a hot object,
# better left to the next pass than fought over.
MAX_ATTEMPTS = 3
# Consecutive objects answered 5xx/unreachable before the pass gives up and waits for the retry.
UNAVAILABLE_STREAK = 3
# An object whose write failed is tried again after 30 s, then 60, 120, ... up to the resync period: a
# write the API server refuses (too large, invalid, denied by a policy) is refused the same way next time.
BACKOFF_FIRST = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=10)


# Writes sent at once while the pass decides the next objects (converge_all): four threads, at most sixteen
# sent and unanswered. The answer's wait is the API server's and etcd's (a commit each), and the pass decides
# meanwhile. Against two threads and eight in flight, on kube-apiserver with two cores: at 10,000 workloads
# first convergence 38-42 s -> 29-31 s and a burst of 1,000 template changes 13-16 s -> 10-11 s, every
# process spending less CPU; at 100,000, 515 and 578 s against 620 and 616 s the same day, the peak the same
# (bench/results/reconcile-live.md). Sixteen bound what waits in memory (sixteen Secrets' bodies, a few KiB
# each) and what a pass that stops must still see answered. Every write, not creates alone: a burst of
# template changes, a renewal wave or a CA rotation re-issues Secrets that exist.
WRITERS = 4
IN_FLIGHT = 16


class _Undecided:
    """No first decision given: _converge_now decides (and a backoff that holds the object back says so)."""


_UNDECIDED = _Undecided()
_Outcome = Write | Refused | Waiting | Deferred | None


class WriteCache(Protocol):
    """What the writer needs of the loop's cache (cache.ClusterCache): our own writes' watch events kept
    quiet while we write, and what we wrote put in at once."""

    def writing(self, kind: str, key: tuple[str, str]) -> AbstractContextManager[object]: ...

    def assume(self, kind: str, key: tuple[str, str], stored: Obj | None, *, was: str) -> Obj | None: ...


@dataclass
class _Flying:
    """A write sent and not yet taken up."""

    item: Item
    existing: Obj | None
    write: Write
    sent: Future[Obj | None]
    quiet: AbstractContextManager[object]


class Writer:
    """One object at a time: its write, its backoff, its Events."""

    def __init__(self, api: KubeApi, metrics: ReconcileMetrics, announcer: Announcer, *, namespace: str,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        self._api = api
        self._namespace = namespace  # our own: where an object of no namespace is read (as a pass reads it)
        self._metrics = metrics
        self._announcer = announcer
        self._may_write = may_write
        # Objects whose write failed: (failures in a row, not tried again before). A write the API server
        # keeps refusing is retried after 30 s, doubling up to the resync period, not at every pass.
        self._backoff: dict[tuple[str, str, str], tuple[int, datetime]] = {}
        self._failing: set[tuple[str, str, str]] = set()  # failed in the pass under way
        # The long-running loop's cache (app/reconcile/loop/cache.py): our writes go into it at once. None for
        # `reconcile --once` and the other one-shot commands.
        self._cache: WriteCache | None = None

    def use_cache(self, cache: WriteCache | None) -> None:
        """The loop's cache, which what is written goes into at once (ClusterCache.assume)."""
        self._cache = cache

    def guard(self) -> None:
        """Stop at once (NotLeader) when this replica may no longer write."""
        if not self._may_write():
            raise NotLeader("lost the leader lease")

    def backing_off(self, key: tuple[str, str, str]) -> bool:
        """The last write of this object (kind, namespace, name) failed: it waits out its backoff."""
        return key in self._backoff

    def write_stored(self, write: Write, report: PassReport, *, existing: Obj | None) -> Obj | None:
        """Make one write outside a plan (a CA Secret's step) and put what is stored into the cache: our own
        write, whose watch event calls for no full pass. A 409 (Conflict) is the caller's to handle."""
        key = (write.namespace or "", write.name)
        with self._quiet_key(write.resource.kind, key):
            stored = self.write(write, report)
            if self._cache is not None:  # our own write: its event calls for no full pass
                was = str(((existing or {}).get("metadata") or {}).get("resourceVersion") or "")
                self._cache.assume(write.resource.kind, key, stored, was=was)
        return stored

    def retries(self, namespaces: set[str] | None = None) -> dict[str, datetime]:
        """When the next write of each of `namespaces` (None: any) that failed may be tried again (its
        backoff's end)."""
        due: dict[str, datetime] = {}
        for (_kind, namespace, _name), (_failures, retry_at) in self._backoff.items():
            if namespaces is None or namespace in namespaces:
                due[namespace] = min(retry_at, due.get(namespace, retry_at))
        return due

    def converge_all(self, items: Iterable[tuple[Item, Obj | None]], report: PassReport, now: datetime,
                     done: Callable[[Item, Obj | None], None], budget: TurnBudget | None = None) -> None:
        """Each (item, what is stored) converged as _converge_cached does, `done` told what is stored at the
        end of each; but each first write (create, update or delete) is sent by one of WRITERS threads while
        the next items are decided, with at most IN_FLIGHT sent and not yet answered. A pass that issues
        100,000 certificates otherwise waits for each answer before issuing the next (a first pass at
        100,000 workloads spent a quarter of its time waiting). An answer is taken up in order, on this
        thread, as a write made here at once would be: a 409 (re-read, decided again and written here) or
        an error is handled by the same code, the write's bookkeeping and Events the same.
        With `budget`, what each item costs this thread (its decision, a key generated, a write made here,
        the wait for its answer) is charged to its namespace (budget.py); the decisions read the same
        budget (Signing.budget)."""
        flying: deque[_Flying] = deque()
        with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="write") as pool:
            try:
                for item, existing in items:
                    while len(flying) >= IN_FLIGHT or (flying and flying[0].sent.done()):
                        self._land(flying.popleft(), report, now, done, budget)
                    started = budget.clock() if budget is not None else 0.0
                    first = self._first(item, existing, now)
                    if isinstance(first, Write):
                        self.guard()
                        quiet = self._quiet(item)
                        quiet.__enter__()
                        flying.append(_Flying(item, existing, first, pool.submit(self._send, first), quiet))
                    else:
                        done(item, self.converge_cached(item, existing, report, now, first=first))
                    if budget is not None:
                        budget.charge(item.namespace, budget.clock() - started)
                while flying:
                    self._land(flying.popleft(), report, now, done, budget)
            finally:  # a pass that stopped (lost lease, API down): what was sent is still let through the cache
                for left in flying:
                    with contextlib.suppress(Exception):
                        left.sent.result()
                    left.quiet.__exit__(None, None, None)

    def _first(self, item: Item, existing: Obj | None, now: datetime) -> _Outcome | _Undecided:
        """What to write first: decided here unless a backoff holds the object back (_converge says so)."""
        if self._backoff and self._backoff.get(item.key, (0, now))[1] > now:  # most passes: no backoff at all
            return _UNDECIDED
        return item.decide(existing)

    def _land(self, flying: _Flying, report: PassReport, now: datetime, done: Callable[[Item, Obj | None], None],
              budget: TurnBudget | None) -> None:
        """Take up one answer, `done` told; the wait for it (and a 409's re-read and write) is charged to the
        item's namespace, as a write made here would be: a tenant's churn of updates must not hold the loop
        past its budget by the time the API server takes to answer them."""
        started = budget.clock() if budget is not None else 0.0
        done(*self._landed(flying, report, now))
        if budget is not None:
            budget.charge(flying.item.namespace, budget.clock() - started)

    def _landed(self, flying: _Flying, report: PassReport, now: datetime) -> tuple[Item, Obj | None]:
        try:
            stored = self._converge(flying.item, flying.existing, report, now, first=flying.write, sent=flying.sent)
            return flying.item, self._assumed(flying.item, flying.existing, stored)
        finally:
            flying.quiet.__exit__(None, None, None)

    def _quiet(self, item: Item) -> AbstractContextManager[object]:
        """While an object is written: its watch events call no one (ClusterCache.writing)."""
        return self._quiet_key(item.resource.kind, (item.namespace, item.name))

    def _quiet_key(self, kind: str, key: tuple[str, str]) -> AbstractContextManager[object]:
        return nullcontext() if self._cache is None else self._cache.writing(kind, key)

    def converge_cached(self, item: Item, existing: Obj | None, report: PassReport, now: datetime, *,
                         first: _Outcome | _Undecided = _UNDECIDED) -> Obj | None:
        """_converge, then what it wrote into the cache at once (ClusterCache.assume), when there is one."""
        if first is None:  # decided already, nothing to write (nearly every item of a resync): no write's own
            # watch event to quiet (two informers' locks taken and released twice: ~4% of a resync's CPU)
            return self._converge(item, existing, report, now, first=first)
        # Assumed before the write's own watch event is let through: one that came between would queue work.
        with self._quiet(item):
            return self._assumed(item, existing, self._converge(item, existing, report, now, first=first))

    def _assumed(self, item: Item, existing: Obj | None, stored: Obj | None) -> Obj | None:
        if self._cache is None or stored is existing:
            return stored
        was = str(((existing or {}).get("metadata") or {}).get("resourceVersion") or "")
        kept = self._cache.assume(item.resource.kind, (item.namespace, item.name), stored, was=was)
        return stored if kept is None else kept  # the cache's copy: the answer's own is freed at once

    def _converge(self, item: Item, existing: Obj | None, report: PassReport, now: datetime, *,
                  first: _Outcome | _Undecided = _UNDECIDED, sent: Future[Obj | None] | None = None) -> Obj | None:
        """Decide and write one object, re-reading after a 409; returns what is stored at the end. `first`:
        its first decision, made already (`sent`: and its write sent)."""
        key = item.key  # a property making its tuple at each read
        failures, retry_at = self._backoff.get(key, (0, now))
        if retry_at > now:
            self._failed(item, f"{failures} writes failed in a row; next try at {retry_at.isoformat()}", report, now)
            return existing
        stored = self._converge_now(item, existing, report, now, first=first, sent=sent)
        if key in self._failing:
            self._failing.discard(key)
            delay = min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX) if failures else timedelta(0)
            self._backoff[key] = (failures + 1, now + delay)
        else:
            self._backoff.pop(key, None)
        return stored

    def _converge_now(self, item: Item, existing: Obj | None, report: PassReport, now: datetime, *,
                      first: _Outcome | _Undecided = _UNDECIDED, sent: Future[Obj | None] | None = None) -> Obj | None:
        for attempt in range(MAX_ATTEMPTS):
            outcome = first if attempt == 0 and not isinstance(first, _Undecided) else item.decide(existing)
            if isinstance(outcome, Waiting) and existing is None and (found := self._unlisted(item)) is not None:
                existing = found  # someone else's Secret in the way: a conflict to report, not a wait
                continue
            if isinstance(outcome, Waiting):
                self._waiting(item, outcome, report, now)
                outcome = outcome.refresh
            elif isinstance(outcome, Deferred):  # its namespace spent this turn's budget, or waits for a key
                (report.for_keys if outcome.for_key else report.deferred).add(item.namespace)
                outcome = outcome.refresh
            if outcome is None:
                return existing
            if isinstance(outcome, Refused):
                self._refused(item, outcome, report, now)
                return existing
            try:
                stored = self.write(outcome, report, item=item, sent=sent if attempt == 0 else None)
            except Conflict:
                existing = self._read_optional(item.resource, item.name, item.namespace)
                continue
            except NotFound:
                if outcome.action != "update":
                    return None  # deleted already, or the namespace itself is gone
                existing = None
                continue
            except KubeError as e:
                self._write_failed(item, outcome, e, report, now)
                return existing
            report.unavailable_streak = 0
            return stored
        self._failing.add(item.key)
        self._failed(item, "kept conflicting", report, now)
        return existing

    def _unlisted(self, item: Item) -> Obj | None:
        """A certificate Secret the pass did not list (it lists ours only, by label) may still exist,
        someone else's: a create would meet it, but a certificate waiting for a CA creates nothing, and
        would say "waits" while the way is blocked. One read for each certificate that waits with no
        Secret of ours: a handful during a CA rotation, none otherwise."""
        return self._read_optional(item.resource, item.name, item.namespace) if item.resource is SECRETS else None

    def _write_failed(self, item: Item, write: Write, error: KubeError, report: PassReport, now: datetime) -> None:
        if isinstance(error, Unavailable):
            # One 5xx may be about this object (a broken webhook on Secrets, say); several in a row
            # mean the API server is in trouble, and hammering it with the rest would not help.
            report.unavailable_streak += 1
            if report.unavailable_streak >= UNAVAILABLE_STREAK:
                raise error
        self._failing.add(item.key)
        self._failed(item, f"{write.action}: {error}", report, now)

    def _read_optional(self, resource: Resource, name: str, namespace: str) -> Obj | None:
        """The object, or None only when the API confirmed it does not exist (any other error propagates)."""
        try:
            return self._api.get(resource, name, namespace=namespace or self._namespace)
        except NotFound:
            return None

    def write(self, write: Write, report: PassReport, *, item: Item | None = None,
              sent: Future[Obj | None] | None = None) -> Obj | None:
        """Make the write (or take the answer of the one `sent` already, checked then to lead), and tell it."""
        if sent is None:
            self.guard()
            stored = self._send(write)
        else:
            stored = sent.result()
        report.writes[write.action] += 1
        report.reasons[write.reason] += 1
        log.info("object written", extra={"action": write.action, "kind": write.resource.kind,
                                          "namespace": write.namespace, "object": write.name, "reason": write.reason})
        if item is not None:
            self._written(item, write, report)
        return stored

    def _send(self, write: Write) -> Obj | None:
        if write.action == "create":
            return self._api.create(write.resource, write.body or {}, namespace=write.namespace)
        if write.action == "update":
            return self._api.replace(write.resource, write.body or {})
        self._api.delete(write.resource, write.name, namespace=write.namespace, resource_version=write.resource_version)
        return None

    def _written(self, item: Item, write: Write, report: PassReport) -> None:
        """A certificate issued or renewed is counted, and a workload's kept for its namespace's one Event
        (tell_issued). One no workload asked for (the webhook's own serving certificate) is told to nobody,
        as before: its namespace may have no trust bundle, and the bootstrap Job's RBAC writes no Event."""
        verb, _, why = write.reason.partition(":")
        if verb in ("issued", "renewed"):
            what = "client certificate" if item.client else "certificate"
            self._metrics.rotations.labels("client-leaf" if item.client else "leaf", why).inc()
            if item.workloads:
                report.issued.setdefault(item.namespace, []).append(f"Secret {item.name}: {what} {verb} ({why})")

    def tell_issued(self, report: PassReport, now: datetime) -> None:
        """One Normal Event per namespace for the certificates the pass issued or renewed there (in the loop
        at most one per namespace per window: Announcer.tell_issued): routine, so counted and aggregated;
        what a person must act on keeps an Event per object (Announcer.announce)."""
        for namespace, told in report.issued.items():
            self._announcer.tell_issued(namespace, told, now)

    def _refused(self, item: Item, refused: Refused, report: PassReport, now: datetime) -> None:
        report.conflicts.append(refused.message)
        log.warning("object not owned; left untouched", extra={"namespace": item.namespace, "object": item.name})
        self._announcer.announce(item.workloads, f"{item.namespace}/{item.name}", reason="SecretConflict",
                                 message=refused.message, now=now)

    def _waiting(self, item: Item, waiting: Waiting, report: PassReport, now: datetime) -> None:
        """Reported every pass (log, report, gauge); the Event once per wait, not once per pass."""
        key = f"{item.namespace}/{item.name}"
        report.waiting[key] = waiting.message
        log.warning("certificate waits for a CA that may sign", extra={"namespace": item.namespace,
                                                                       "object": item.name, "reason": waiting.message})
        self._announcer.announce(item.workloads, key, reason="CertificateWaiting", message=waiting.message, now=now)

    def _failed(self, item: Item, why: str, report: PassReport, now: datetime) -> None:
        report.failed.append(f"{item.resource.kind} {item.namespace}/{item.name}: {why}")
        self._metrics.failures.labels("client-secret" if item.client else item.resource.kind.lower()).inc()
        log.warning("object not converged", extra={"namespace": item.namespace, "object": item.name, "error": why})
        self._announcer.announce(item.workloads, f"{item.resource.kind}/{item.namespace}/{item.name}",
                                 reason="ClientCertificateFailed" if item.client else "CertificateFailed", message=why,
                                 now=now)
