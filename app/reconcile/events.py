"""Kubernetes Events on workloads, so `kubectl describe` shows what happened to their certificates."""

from __future__ import annotations

import logging
import queue
import secrets
import threading
from datetime import datetime
from typing import Literal

from tls_injector.kube import EVENTS, KubeApi, KubeError
from tls_injector.names import EVENT_COMPONENT
from tls_injector.reconcile.discover import WorkloadRef

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
            api.create(EVENTS, event_body(ref, reason=reason, message=message, kind=kind, now=now),
                       namespace=ref.namespace)
        except KubeError as e:
            log.debug("event not recorded", extra={"workload": str(ref), "reason": reason, "error": str(e)})


# Events the loop's outbox holds before a pass writing faster than they are posted waits: ~1 KiB each, so
# at most ~1 MiB; a pass issuing 100,000 certificates posts one Event each beside its Secret writes.
OUTBOX_SIZE = 1000


class Outbox:
    """The long-running loop's Events, posted by a thread of their own while the pass goes on writing
    Secrets: each is a call the API server takes its time to answer, and the pass need not wait for it
    (half the calls of a first pass are Events). Best effort as `emit`; `flush` waits until all are
    posted, so a pass ends with its Events written, as without an outbox."""

    def __init__(self, api: KubeApi, size: int = OUTBOX_SIZE) -> None:
        self._api = api
        self._queue: queue.Queue[tuple[WorkloadRef, dict[str, object]]] = queue.Queue(maxsize=size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def emit(self, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
             kind: Literal["Normal", "Warning"], now: datetime) -> None:
        self._start()
        for ref in refs:
            self._queue.put((ref, event_body(ref, reason=reason, message=message, kind=kind, now=now)))

    def flush(self) -> None:
        self._queue.join()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._post_all, daemon=True, name="events")
                self._thread.start()

    def _post_all(self) -> None:
        while True:
            ref, body = self._queue.get()
            try:
                self._api.create(EVENTS, body, namespace=ref.namespace)
            except KubeError as e:
                log.debug("event not recorded", extra={"workload": str(ref), "reason": body.get("reason"),
                                                       "error": str(e)})
            except Exception:  # the thread must outlive anything one Event meets
                log.exception("event not recorded")
            finally:
                self._queue.task_done()
