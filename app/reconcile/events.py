"""Kubernetes Events on workloads, so `kubectl describe` shows what happened to their certificates."""

from __future__ import annotations

import logging
import secrets
from datetime import datetime
from typing import Literal

from app.kube import EVENTS, KubeApi, KubeError
from app.names import EVENT_COMPONENT
from app.reconcile.discover import WorkloadRef

log = logging.getLogger("tls_injector.events")
COMPONENT = EVENT_COMPONENT


def event_body(ref: WorkloadRef, *, reason: str, message: str, kind: Literal["Normal", "Warning"],
               now: datetime) -> dict[str, object]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # Unique per occurrence, like client-go's recorder: `<object>.<random hex>`.
        "metadata": {"name": f"{ref.name}.{secrets.token_hex(8)}", "namespace": ref.namespace},
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


def emit(api: KubeApi, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
         kind: Literal["Normal", "Warning"], now: datetime) -> None:
    """Best effort: an Event that cannot be written must not fail the certificate work it reports."""
    for ref in refs:
        try:
            api.create(EVENTS, event_body(ref, reason=reason, message=message, kind=kind, now=now),
                       namespace=ref.namespace)
        except KubeError as e:
            log.debug("event not recorded", extra={"workload": str(ref), "reason": reason, "error": str(e)})
