"""Leader election through a coordination.k8s.io/v1 Lease, so that only one replica writes.

Timing follows client-go's defaults: a 15 s lease, renewed well inside 10 s. A leader that could not
renew for 10 s stops writing, 5 s before any other replica may take over (it waits a full 15 s of
seeing the same record, measured on its own clock, so clock skew between nodes does not matter).

A leader renews on the Lease as its own last write left it, without reading it first (client-go's fast
path): one call every 2 s instead of two. The write carries that version, so if anyone wrote the Lease
since, the apiserver answers 409 and the round reads it and decides as a replica that does not lead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from tls_injector.kube.api import LEASES, KubeApi, Obj
from tls_injector.kube.errors import Conflict, KubeError, NotFound
from tls_injector.names import LEASE_NAME

log = logging.getLogger("tls_injector.lease")
LEASE_DURATION = timedelta(seconds=15)
RENEW_DEADLINE = timedelta(seconds=10)
RETRY_PERIOD = timedelta(seconds=2)

Step = Literal["renew", "take", "wait"]


def lease_step(spec: Obj, *, identity: str, unchanged_for: timedelta, duration: timedelta) -> Step:
    """What to do with a Lease we read: ours -> renew; free or expired (unchanged too long) -> take."""
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return "renew"
    if not holder or unchanged_for >= duration:
        return "take"
    return "wait"


@dataclass
class LeaderElector:
    api: KubeApi
    namespace: str
    identity: str
    name: str = LEASE_NAME
    duration: timedelta = LEASE_DURATION
    renew_deadline: timedelta = RENEW_DEADLINE
    _renewed_at: datetime | None = None
    _observed: tuple[str, datetime] | None = field(default=None, repr=False)
    _held: Obj | None = field(default=None, repr=False)  # the Lease as our last successful write left it

    def is_leader(self, now: datetime) -> bool:
        """True until `renew_deadline` after the last successful renewal, measured on our clock."""
        return self._renewed_at is not None and now - self._renewed_at < self.renew_deadline

    def since_renewal(self, now: datetime) -> timedelta | None:
        """How long since the last successful renewal (None: not renewed since it last led, or never)."""
        return None if self._renewed_at is None else now - self._renewed_at

    def try_lead(self, now: datetime) -> bool:
        """One election round (call every RETRY_PERIOD); True when we hold the lease now."""
        held, self._held = self._held, None
        if held is not None and self.is_leader(now):
            try:
                return self._write(now, held, transitions=int((held.get("spec") or {}).get("leaseTransitions") or 0),
                                   stale_raises=True)
            except (Conflict, NotFound):
                pass  # written or deleted since our last renewal: read it and decide
        try:
            lease = self.api.get(LEASES, self.name, namespace=self.namespace)
        except NotFound:
            return self._write(now, None, transitions=0)
        except KubeError as e:
            log.warning("lease unreadable; leading only until the renew deadline", extra={"error": str(e)})
            return self.is_leader(now)
        spec = lease.get("spec") or {}
        step = lease_step(spec, identity=self.identity, unchanged_for=self._unchanged_for(lease, now),
                          duration=self.duration)
        if step == "wait":
            self._renewed_at = None
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (step == "take")
        return self._write(now, lease, transitions=transitions)

    def _unchanged_for(self, lease: Obj, now: datetime) -> timedelta:
        version = str(lease["metadata"].get("resourceVersion"))
        if self._observed is None or self._observed[0] != version:
            self._observed = (version, now)
        return now - self._observed[1]

    def _write(self, now: datetime, lease: Obj | None, *, transitions: int, stale_raises: bool = False) -> bool:
        spec = dict((lease or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = _micro_time(now)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.duration.total_seconds()),
                    renewTime=_micro_time(now), leaseTransitions=transitions)
        try:
            if lease is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
                stored = self.api.create(LEASES, body, namespace=self.namespace)
            else:
                stored = self.api.replace(LEASES, {**lease, "spec": spec})
        except KubeError as e:
            if stale_raises and isinstance(e, Conflict | NotFound):
                raise  # the Lease is not as our last write left it: the caller reads it
            if isinstance(e, Conflict):  # someone else wrote first (AlreadyExists included): they lead
                self._renewed_at = None
                return False
            log.warning("lease renewal failed", extra={"error": str(e)})
            return self.is_leader(now)
        self._renewed_at = now
        self._held = stored
        return True


def _micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
