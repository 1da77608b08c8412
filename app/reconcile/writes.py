"""Writing one object: decide, write with its preconditions, re-read on a 409, back off an object whose
writes keep failing, and tell the workloads concerned (Events once while a condition lasts, the log and
the report at every pass)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Literal

from app.kube import SECRETS, Conflict, KubeError, NotFound, Unavailable
from app.reconcile import events
from app.reconcile.discover import WorkloadRef
from app.reconcile.plan import Item, Obj, Refused, Waiting, Write
from app.reconcile.state import NotLeader, PassReport, ReconcilerState

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


class Writes(ReconcilerState):
    """One object at a time: its write, its backoff, its Events."""

    def retries(self, namespaces: set[str] | None = None) -> dict[str, datetime]:
        """When the next write of each of `namespaces` (None: any) that failed may be tried again (its
        backoff's end)."""
        due: dict[str, datetime] = {}
        for (_kind, namespace, _name), (_failures, retry_at) in self._backoff.items():
            if namespaces is None or namespace in namespaces:
                due[namespace] = min(retry_at, due.get(namespace, retry_at))
        return due

    def _converge_cached(self, item: Item, existing: Obj | None, report: PassReport, now: datetime) -> Obj | None:
        """_converge, then what it wrote into the cache at once (ClusterCache.assume), when there is one."""
        if self.cache is None:
            return self._converge(item, existing, report, now)
        # Assumed before the write's own watch event is let through: one that came between would queue work.
        with self.cache.writing(item.resource.kind, (item.namespace, item.name)):
            stored = self._converge(item, existing, report, now)
            if stored is not existing:
                was = str(((existing or {}).get("metadata") or {}).get("resourceVersion") or "")
                kept = self.cache.assume(item.resource.kind, (item.namespace, item.name), stored, was=was)
                return stored if kept is None else kept  # the cache's copy: the answer's own is freed at once
        return stored

    def _converge(self, item: Item, existing: Obj | None, report: PassReport, now: datetime) -> Obj | None:
        """Decide and write one object, re-reading after a 409; returns what is stored at the end."""
        failures, retry_at = self._backoff.get(item.key, (0, now))
        if retry_at > now:
            self._failed(item, f"{failures} writes failed in a row; next try at {retry_at.isoformat()}", report, now)
            return existing
        stored = self._converge_now(item, existing, report, now)
        if item.key in self._failing:
            self._failing.discard(item.key)
            delay = min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX) if failures else timedelta(0)
            self._backoff[item.key] = (failures + 1, now + delay)
        else:
            self._backoff.pop(item.key, None)
        return stored

    def _converge_now(self, item: Item, existing: Obj | None, report: PassReport, now: datetime) -> Obj | None:
        for _ in range(MAX_ATTEMPTS):
            outcome = item.decide(existing)
            if isinstance(outcome, Waiting) and existing is None and (found := self._unlisted(item)) is not None:
                existing = found  # someone else's Secret in the way: a conflict to report, not a wait
                continue
            if isinstance(outcome, Waiting):
                self._waiting(item, outcome, report, now)
                outcome = outcome.refresh
            if outcome is None:
                return existing
            if isinstance(outcome, Refused):
                self._refused(item, outcome, report, now)
                return existing
            try:
                stored = self._write(outcome, report, item=item, now=now)
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

    def _write(self, write: Write, report: PassReport, *, item: Item | None = None,
               now: datetime | None = None) -> Obj | None:
        if not self.may_write():
            raise NotLeader("lost the leader lease")
        stored: Obj | None = None
        if write.action == "create":
            stored = self.api.create(write.resource, write.body or {}, namespace=write.namespace)
        elif write.action == "update":
            stored = self.api.replace(write.resource, write.body or {})
        else:
            self.api.delete(write.resource, write.name, namespace=write.namespace,
                            resource_version=write.resource_version)
        report.writes[write.action] += 1
        report.reasons[write.reason] += 1
        log.info("object written", extra={"action": write.action, "kind": write.resource.kind,
                                          "namespace": write.namespace, "object": write.name, "reason": write.reason})
        if item is not None and now is not None:
            self._written(item, write, now)
        return stored

    def _written(self, item: Item, write: Write, now: datetime) -> None:
        verb, _, why = write.reason.partition(":")
        if verb in ("issued", "renewed"):
            what = "client certificate" if item.client else "certificate"
            self.metrics.rotations.labels("client-leaf" if item.client else "leaf", why).inc()
            reason = f"{'Client' if item.client else ''}Certificate{verb.capitalize()}"
            self._emit(item.workloads, reason=reason, kind="Normal", now=now,
                       message=f"Secret {item.name}: {what} {verb} ({why})")

    def _emit(self, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
              kind: Literal["Normal", "Warning"], now: datetime) -> None:
        """Through the loop's outbox when there is one (posted beside the pass), else at once."""
        if self.outbox is not None:
            self.outbox.emit(refs, reason=reason, kind=kind, message=message, now=now)
        else:
            events.emit(self.api, refs, reason=reason, kind=kind, message=message, now=now)

    def _refused(self, item: Item, refused: Refused, report: PassReport, now: datetime) -> None:
        report.conflicts.append(refused.message)
        log.warning("object not owned; left untouched", extra={"namespace": item.namespace, "object": item.name})
        self._announce(item.workloads, f"{item.namespace}/{item.name}", reason="SecretConflict",
                       message=refused.message, now=now)

    def _waiting(self, item: Item, waiting: Waiting, report: PassReport, now: datetime) -> None:
        """Reported every pass (log, report, gauge); the Event once per wait, not once per pass."""
        key = f"{item.namespace}/{item.name}"
        report.waiting[key] = waiting.message
        log.warning("certificate waits for a CA that may sign", extra={"namespace": item.namespace,
                                                                       "object": item.name, "reason": waiting.message})
        self._announce(item.workloads, key, reason="CertificateWaiting", message=waiting.message, now=now)

    def _announce(self, refs: tuple[WorkloadRef, ...], key: str, *, reason: str, message: str, now: datetime,
                  kind: Literal["Normal", "Warning"] = "Warning") -> None:
        """A Warning Event for a condition of `key`, once while it lasts: the log and the report say it at
        every pass; the Event list says it once (and again if it ends and comes back)."""
        condition = (reason, key)
        self._lasting.add(condition)
        for ref in refs:
            self._facts.setdefault(ref, []).append((reason, message))
        if condition not in self._told:
            self._told.add(condition)
            self._emit(refs, reason=reason, kind=kind, message=message, now=now)

    def _failed(self, item: Item, why: str, report: PassReport, now: datetime) -> None:
        report.failed.append(f"{item.resource.kind} {item.namespace}/{item.name}: {why}")
        self.metrics.failures.labels("client-secret" if item.client else item.resource.kind.lower()).inc()
        log.warning("object not converged", extra={"namespace": item.namespace, "object": item.name, "error": why})
        self._announce(item.workloads, f"{item.resource.kind}/{item.namespace}/{item.name}",
                       reason="ClientCertificateFailed" if item.client else "CertificateFailed", message=why, now=now)
