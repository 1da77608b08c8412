"""Kubernetes Events on workloads, so `kubectl describe` shows what happened to their certificates."""

from __future__ import annotations

import logging
import queue
import secrets
import threading
from datetime import datetime
from typing import Literal

from tls_injector.kube import EVENTS, KubeApi, KubeError
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


def issued_message(told: list[str]) -> str:
    """`N certificates issued or renewed: <what each>; ...; and K more`, each as `Secret x: ... issued (why)`."""
    head = f"{len(told)} certificate{'s' if len(told) != 1 else ''} issued or renewed: "
    listed: list[str] = []
    for size, one in enumerate(told):
        if len(head) + sum(len(x) + 2 for x in listed) + len(one) > LISTED_CHARS:
            return head + "; ".join(listed) + f"; and {len(told) - size} more"
        listed.append(one)
    return head + "; ".join(listed)


# Events the loop's outbox holds before a pass writing faster than they are posted waits: ~1 KiB each, so
# at most ~1 MiB; a pass tells at most one issuance Event per namespace, and a Warning per object concerned.
OUTBOX_SIZE = 1000


class Outbox:
    """The long-running loop's Events, posted by a thread of their own while the pass goes on writing
    Secrets: each is a call the API server takes its time to answer, and the pass need not wait for it
    (a first pass tells each of 10,000 namespaces its certificates, and each conflict its workloads). Best
    effort as `emit`; `flush` waits until all are posted, so a pass ends with its Events written, as
    without an outbox."""

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
                self._api.post(EVENTS, body, namespace=ref.namespace)
            except KubeError as e:
                log.debug("event not recorded", extra={"workload": str(ref), "reason": body.get("reason"),
                                                       "error": str(e)})
            except Exception:  # the thread must outlive anything one Event meets
                log.exception("event not recorded")
            finally:
                self._queue.task_done()
