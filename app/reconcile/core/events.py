"""Kubernetes Events on workloads, so `kubectl describe` shows what happened to their certificates."""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from tls_injector.kube import EVENTS, KubeApi, KubeError, Unavailable
from tls_injector.names import EVENT_COMPONENT, TRUST_BUNDLE_CONFIGMAP
from tls_injector.reconcile.core.discover import WorkloadRef

log = logging.getLogger("tls_injector.events")
COMPONENT = EVENT_COMPONENT


def event_body(ref: WorkloadRef, *, reason: str, message: str, kind: Literal["Normal", "Warning"],
               now: datetime) -> dict[str, object]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # Unique per occurrence, like client-go's recorder: `<object>.<random hex>`, the object's name cut so
        # the whole stays a name the API accepts (a workload may be called with 253 characters).
        "metadata": {"name": event_name(ref.name), "namespace": ref.namespace},
        "involvedObject": {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "uid": ref.uid,
                           "apiVersion": ref.api_version},
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
    }


# An Event's name is a DNS subdomain of at most 253 characters; `.<16 hex>` takes 17 of them.
_MAX_NAME, _SUFFIX_HEX = 253, 8


def event_name(workload: str) -> str:
    """`<workload>.<16 random hex>`, the workload's name cut (and stripped of a trailing `-` or `.`, which
    would end a label) where the whole would pass 253 characters."""
    cut = workload[: _MAX_NAME - 2 * _SUFFIX_HEX - 1].rstrip("-.")
    return f"{cut}.{secrets.token_hex(_SUFFIX_HEX)}"


def emit(api: KubeApi, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
         kind: Literal["Normal", "Warning"], now: datetime) -> None:
    """Best effort: an Event that cannot be written must not fail the certificate work it reports."""
    for ref in refs:
        try:
            api.post(EVENTS, event_body(ref, reason=reason, message=message, kind=kind, now=now),
                     namespace=ref.namespace)
        except KubeError as e:
            log.debug("event not recorded", extra={"workload": str(ref), "reason": reason, "error": str(e)})


# The routine issuance and renewal of one namespace in one pass is told by one Event (CertificatesIssued,
# writes.py) whatever their number. An Event per certificate was half the creates of a first convergence
# (10,000 Events beside 10,000 Secrets at 10,000 workloads): etcd's load, not information;
# tls_injector_rotations_total counts every one.
# What the Event's message lists of them before "and N more": each is ~60 characters, so ~15 fit in the
# 1,024 characters of a message the API server keeps whole.
LISTED_CHARS = 900


def issued_ref(namespace: str) -> WorkloadRef:
    """What the Event is about: the namespace's trust bundle, ours in every namespace that gets certificates.
    `kubectl events -n NS` lists it beside the workloads' own; an Event on the Namespace would be written in
    `default` (the API server's rule for a cluster-scoped object), out of the namespace owner's sight."""
    return WorkloadRef("ConfigMap", namespace, TRUST_BUNDLE_CONFIGMAP, api_version="v1")


def issued_message(told: list[str], count: int | None = None) -> str:
    """`N certificates issued or renewed: <what each>; ...; and K more`, each as `Secret x: ... issued (why)`.
    `count`: how many in all when `told` lists only the first of them (IssuedTally keeps HELD_LINES)."""
    total = len(told) if count is None else max(count, len(told))
    head = f"{total} certificate{'s' if total != 1 else ''} issued or renewed: "
    listed: list[str] = []
    for one in told:
        if len(head) + sum(len(x) + 2 for x in listed) + len(one) > LISTED_CHARS:
            break
        listed.append(one)
    more = total - len(listed)
    return head + "; ".join(listed) + (f"; and {more} more" if more else "")


# In the running reconciler, a namespace has at most one CertificatesIssued Event per ISSUED_WINDOW seconds.
# A pass tells each namespace once, but the loop's passes are keyed and small: a rollout changing a
# namespace's workloads one by one, or renewals falling due a few seconds apart, are as many passes, and
# were as many Events (on kube-apiserver, 1,000 template changes in 10 namespaces wrote 85 Events beside
# their 1,000 Secret updates; 10 with this). The first issuance after a quiet minute is told at once (a new
# workload's owner sees it without waiting); what is issued in the minute after is held and told by one
# Event when the minute ends. A minute: a rollout's or a CA rotation's re-issues in a namespace fall
# within it, and an owner reading `kubectl events` is never more than a minute behind.
ISSUED_WINDOW = 60.0
# Lines a held namespace keeps for its next Event's message (which names about 15); the rest are counted.
HELD_LINES = 32


class IssuedTally:
    """Per namespace, when it was last told its certificates and what was issued there since (held).

    Its own state only; times are the caller's monotonic seconds. Memory is bounded by the namespaces told
    within the last window (older ones are forgotten at each `due`) and HELD_LINES lines each."""

    def __init__(self, window: float = ISSUED_WINDOW) -> None:
        self._window = window
        self._told_at: dict[str, float] = {}
        self._held: dict[str, tuple[list[str], int]] = {}  # namespace -> (first lines, how many in all)

    def add(self, namespace: str, told: list[str], now: float) -> tuple[list[str], int] | None:
        """What to tell of `namespace` now (its lines, how many), or None: held for when its window ends."""
        last = self._told_at.get(namespace)
        if namespace not in self._held and (last is None or now - last >= self._window):
            self._told_at[namespace] = now
            return told[:HELD_LINES], len(told)
        lines, count = self._held.get(namespace, ([], 0))
        self._held[namespace] = ((lines + told)[:HELD_LINES], count + len(told))
        return None

    def due(self, now: float) -> list[tuple[str, list[str], int]]:
        """The held namespaces whose window has ended, each (namespace, lines, how many), now told."""
        ready = [ns for ns in self._held if now - self._told_at.get(ns, now - self._window) >= self._window]
        out = []
        for namespace in ready:
            lines, count = self._held.pop(namespace)
            self._told_at[namespace] = now
            out.append((namespace, lines, count))
        for namespace in [ns for ns, at in self._told_at.items() if now - at >= self._window and ns not in self._held]:
            del self._told_at[namespace]  # a quiet namespace is told at once next time: nothing to remember
        return out

    def clear(self) -> None:
        """Forget every namespace: what is held is dropped, and each is told at once next time."""
        self._told_at.clear()
        self._held.clear()

    def remembered(self) -> int:
        """How many namespaces it remembers (told within the last window, or held)."""
        return len(self._told_at.keys() | self._held.keys())

    def next_due(self) -> float | None:
        """When the earliest held namespace may be told, or None when none is held."""
        return min((self._told_at[ns] + self._window for ns in self._held), default=None)


# Events the loop's outbox holds before a pass writing faster than they are posted waits: ~1 KiB each, so
# at most ~1 MiB; a pass tells at most one issuance Event per namespace, and a Warning per object concerned.
OUTBOX_SIZE = 1000
# Threads posting the outbox's Events. One posted each Event after the last was answered, and a pass waits
# for its Events at its end: a first pass at 100,000 workloads on kube-apiserver posted its 10,000
# CertificatesIssued over 48 s after its last Secret (bench/results/reconcile-live.md). Four keep four in
# flight beside the writers' four (writes.WRITERS). Four is chosen, not measured apart from the changes it
# came with: the bursts measured held no Events.
POSTERS = 4
# An Event the API server did not take for a passing cause (429, 5xx, a connection cut or refused) is tried
# this many times in all, the pauses doubling from EVENT_RETRY_PAUSE (1 s, then 2 s): one such answer
# otherwise lost the Event for good, with a debug line for all trace. (A first convergence at 100,000
# workloads on kube-apiserver once lost 4,029 of its 10,000 CertificatesIssued, none of them received by
# the server, for no cause found: bench/results/reconcile-live.md. The run again with these tries lost
# none and needed none.) Bounded: the thread's pause holds back the Events queued behind it (three more
# threads post beside it), and a pass waits for its Events at its end. Any other refusal (invalid,
# forbidden) is final at once.
EVENT_TRIES = 3
EVENT_RETRY_PAUSE = 1.0
# ... and only when the try failed within this long. A refusal comes in milliseconds; a try that took longer
# met a server that hangs until the request's timeout (30 s), and trying it again would triple what a pass
# waits for its Events in an outage.
EVENT_RETRY_WITHIN = 5.0


class Outbox:
    """The long-running loop's Events, posted by threads of their own (POSTERS) while the pass goes on writing
    Secrets: each is a call the API server takes its time to answer, and the pass need not wait for it
    (a first pass tells each of 10,000 namespaces its certificates, and each conflict its workloads). Best
    effort as `emit`; `flush` waits until all are posted, so a pass ends with its Events written, as
    without an outbox. Routine issuance goes through its IssuedTally: at most one Event per namespace per
    window, what is held posted by the same threads when the window ends. The order Events are posted in is
    not kept: each carries its own time."""

    def __init__(self, api: KubeApi, size: int = OUTBOX_SIZE, *, tally: IssuedTally | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        # None wakes the thread to look at the tally again (a namespace newly held).
        self._queue: queue.Queue[tuple[WorkloadRef, dict[str, object]] | None] = queue.Queue(maxsize=size)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._tally = tally or IssuedTally()
        self._clock = clock
        self._closed = threading.Event()
        # Since the last flush: Events posted only at a second or third try, Events not posted at all, and
        # the last error. A pass's flush says them in one log line, not one per Event.
        self._retried = self._unrecorded = 0
        self._last_error = ""

    def emit(self, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
             kind: Literal["Normal", "Warning"], now: datetime) -> None:
        if self._closed.is_set():
            return
        self._start()
        for ref in refs:
            self._queue.put((ref, event_body(ref, reason=reason, message=message, kind=kind, now=now)))

    def tell_issued(self, namespace: str, told: list[str], now: datetime) -> None:
        """The certificates issued in `namespace` by a pass: told at once, or held by the tally."""
        if self._closed.is_set():
            return
        with self._lock:
            at_once = self._tally.add(namespace, told, self._clock())
        if at_once is not None:
            self.emit((issued_ref(namespace),), reason="CertificatesIssued", kind="Normal", now=now,
                      message=issued_message(*at_once))
        else:
            self._start()
            self._queue.put(None)  # the thread's wait may end sooner now

    def flush(self) -> None:
        """Every Event emitted so far is posted or given up on (what the tally holds is posted when its window
        ends), and what was not posted at the first try since the last flush is logged, once."""
        self._queue.join()
        with self._lock:
            retried, unrecorded, error = self._retried, self._unrecorded, self._last_error
            self._retried = self._unrecorded = 0
        if unrecorded:
            log.warning("events not recorded", extra={"events": unrecorded, "posted_after_retry": retried,
                                                      "error": error})
        elif retried:
            log.info("events posted after a retry", extra={"events": retried, "error": error})

    def drop_held(self) -> None:
        """This replica no longer leads: what the tally holds is dropped, not posted when its window ends
        (the leader tells its own passes' issuance; the counts stay in status and metrics). Events already
        queued are still posted: they were emitted while it led."""
        with self._lock:
            self._tally.clear()

    def close(self) -> None:
        """The loop has stopped: nothing more is posted and the thread ends. What the tally still holds is
        dropped (routine counts, which the status and metrics keep): a replica whose loop has stopped must
        not write when a window ends."""
        self._closed.set()
        with self._lock:
            started = len(self._threads)
        for _ in range(started):
            self._queue.put(None)  # wakes a thread, which then ends

    def _start(self) -> None:
        with self._lock:
            if not self._threads:
                self._threads = [threading.Thread(target=self._post_all, daemon=True, name=f"events-{n}")
                                 for n in range(POSTERS)]
                for thread in self._threads:
                    thread.start()

    def _post_all(self) -> None:
        while True:
            with self._lock:
                due_at = self._tally.next_due()
            try:
                item = self._queue.get(timeout=None if due_at is None else max(0.0, due_at - self._clock()))
            except queue.Empty:
                if self._closed.is_set():
                    return
                self._post_held()
                continue
            try:
                if item is not None and not self._closed.is_set():
                    self._post(*item)
            finally:
                self._queue.task_done()
            if item is None and self._closed.is_set():
                # Closed: what was queued before is dropped (flush returns), and each thread ends at one of
                # the Nones close() queued after it, one a thread.
                return

    def _post_held(self) -> None:
        with self._lock:
            due = self._tally.due(self._clock())
        for namespace, lines, count in due:
            ref = issued_ref(namespace)
            self._post(ref, event_body(ref, reason="CertificatesIssued", kind="Normal", now=datetime.now(UTC),
                                       message=issued_message(lines, count)))

    def _post(self, ref: WorkloadRef, body: dict[str, object]) -> None:
        pause = EVENT_RETRY_PAUSE
        for attempt in range(1, EVENT_TRIES + 1):
            started = time.monotonic()
            try:
                self._api.post(EVENTS, body, namespace=ref.namespace)
            except KubeError as e:
                with self._lock:
                    self._last_error = f"{type(e).__name__}: {e}"
                passing = isinstance(e, Unavailable) and time.monotonic() - started < EVENT_RETRY_WITHIN
                if passing and attempt < EVENT_TRIES and not self._closed.wait(pause):
                    pause *= 2
                    continue
                self._not_recorded(ref, body, e)
            except Exception:  # the thread must outlive anything one Event meets
                log.exception("event not recorded")
            else:
                if attempt > 1:
                    with self._lock:
                        self._retried += 1
            return

    def _not_recorded(self, ref: WorkloadRef, body: dict[str, object], error: KubeError) -> None:
        log.debug("event not recorded", extra={"workload": str(ref), "reason": body.get("reason"),
                                               "error": str(error)})
        with self._lock:
            self._unrecorded += 1
