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
