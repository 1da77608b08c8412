"""What the last pass saw, for the operator's status API and page: recorded by the pass, never re-read.

A snapshot is built once per full pass from what the pass already holds (the CA sets as stepped, every
target with its stored Secret, the pods it listed), and swapped in whole, so a request reads one
consistent pass and costs no API call. It carries names, states and dates only: no key, no certificate
body, no Secret data.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from tls_injector.injection.workload import pod_workload_name
from tls_injector.names import CLIENT_CA_SECRET
from tls_injector.pki import CaState
from tls_injector.reconcile.ca.machine import CaStep
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.objects import Obj

CaRole = Literal["serving", "client"]
# What each trust state waits for before its next step (app/pki/trust.py; docs/reconcile.md, Rotation).
WAITS_FOR: Mapping[CaState, str] = {
    CaState.UNTRUSTED: "every bundle in use to carry it, then the settle period (kubelet propagation)",
    CaState.TRUSTED_UNUSED: "the next pass, which makes it the signing CA",
    CaState.TRUSTED_USED: "",
    CaState.PHASE_OUT: "no leaf chaining to it any more (leaves are re-issued from the new CA)",
    CaState.ZOMBIE: "the settle period, then it leaves the bundles",
}


@dataclass(frozen=True)
class CaStatus:
    ca_set: str  # the Secret holding the set: the workloads' CA, or the webhook's own
    role: CaRole  # what its leaves are: serving certificates, or client certificates (docs/mtls.md)
    fingerprint: str  # SHA-256, first 16 hex digits (as in the metrics' label)
    subject: str
    root: bool  # self-signed; False for a CA given with its issuers (an intermediate)
    not_after: datetime
    state: str  # the trust state (untrusted, trusted-unused, trusted-used, phase-out, zombie)
    signs: bool
    waits_for: str  # what its next step waits for; empty when it waits for nothing
    next_step_at: datetime | None  # when the set can next move on time alone


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition of a workload's certificate, in the style of cert-manager's: `Ready` always, True
    with reason `Issued` or False with the reason that stops it; then one condition of each other trouble
    that lasts (status True). Reasons are those of the Events the same facts raise (docs/operations.md)."""

    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    namespace: str
    workloads: tuple[str, ...]  # "Deployment/web", every workload sharing the Secret
    secret: str
    not_after: datetime | None  # None: no certificate stored yet
    renew_at: datetime | None
    waiting: str  # why its certificate waits for a CA that may sign; empty when it does not
    conditions: tuple[Condition, ...]  # Ready first, then each other trouble told on its workloads
    # What is wrong with the names its certificate carries, empty when nothing is: names asked for and
    # refused (the rest issued), or that it names no Service at all (issued all the same; no client can
    # verify it until a Service selects the pods). Also a condition (ServiceNamesRefused, NoServiceName).
    names_problem: str = ""


# What keeps a certificate from being Ready, most decisive first: a Secret name that is none is never issued
# (discover.legal_targets); someone else's Secret in the way makes
# waiting for a CA beside the point (nothing could be written there anyway), and a write refused by the
# API server comes before a wait that a write would end.
NOT_READY = ("SecretNameRefused", "SecretConflict", "CertificateFailed", "CertificateWaiting")
# Troubles that do not stop the certificate (it is issued without the refused names; one naming no Service
# is issued all the same, so the pods start, though no client can verify it; the namespace's pods miss the
# next CA; the client certificate is its own Secret), each a condition of its own.
BESIDE = ("ServiceNamesRefused", "NoServiceName", "TrustBundleExcluded", "ClientCertificateRefused",
          "ClientCertificateFailed", "ProfileRefused")
NOT_ISSUED = "no certificate is stored yet; the next pass issues it"


@dataclass(frozen=True)
class PodStatus:
    namespace: str
    name: str
    workload: str


@dataclass(frozen=True)
class MemberStatus:
    """A member cluster of a hub (`reconcile --hub`; empty elsewhere): ready when it has current
    intermediates of both roles, else why not (docs/multicluster.md)."""

    name: str
    ready: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Status:
    pass_at: datetime
    converged: bool
    aborted: str  # why the last pass stopped, empty when it did not
    cas: tuple[CaStatus, ...]
    workloads: tuple[WorkloadStatus, ...]
    pods_missing_injection: tuple[PodStatus, ...]
    members: tuple[MemberStatus, ...] = ()


def ca_statuses(ca_set: str, step: CaStep) -> list[CaStatus]:
    role: CaRole = "client" if ca_set == CLIENT_CA_SECRET else "serving"
    return [CaStatus(ca_set=ca_set, role=role, fingerprint=r.fingerprint[:16],
                     subject=r.cert.subject.rfc4514_string(), root=not r.chain, not_after=r.cert.not_valid_after_utc,
                     state=str(r.state), signs=r.state is CaState.TRUSTED_USED and r.key is not None,
                     waits_for=_waits_for(step, r.state), next_step_at=step.next_step_at)
            for r in step.cas.records]


def _waits_for(step: CaStep, state: CaState) -> str:
    if state is CaState.UNTRUSTED and step.waiting:
        return step.waiting  # the set's own account, with the time when it knows one
    return WAITS_FOR[state]


Facts = Mapping[WorkloadRef, Sequence[tuple[str, str]]]  # the (reason, message) of each Warning Event of the pass


def workload_statuses(targets: Iterable[Target], expiries: Mapping[tuple[str, str], datetime],
                      waiting: Mapping[str, str], facts: Facts | None = None,
                      renewals: Mapping[tuple[str, str], datetime] | None = None,
                      *, previous: Iterable[WorkloadStatus] = ()) -> list[WorkloadStatus]:
    """Each certificate Secret with its dates and conditions, from the facts the pass raised Events for
    (their reasons and messages, by the workloads they were raised on). One equal to its entry in `previous`
    (the status the last pass left) is that entry: the status a pass builds is held beside the last one
    until it replaces it, and nearly every entry is as it was (~0.25 KiB each, ~25 MiB at 100,000 held
    twice at a pass's peak otherwise)."""
    held = {(w.namespace, w.secret): w for w in previous}
    renewals = renewals or {}
    found = []
    for t in targets:
        not_after = expiries.get((t.namespace, t.secret_name))
        # When the pass decides it is due (reports.Expiries.renewals: a share of the life it got), else by profile.
        renew_at = renewals.get((t.namespace, t.secret_name)) or (
            not_after - t.profile.renew_before if not_after else None)
        told: dict[str, str] = {}
        if facts:  # most passes tell nothing: no workload's hash to compute
            for ref in t.workloads:
                for reason, message in facts.get(ref, ()):
                    told.setdefault(reason, message)
        status = WorkloadStatus(
            namespace=t.namespace, workloads=tuple(sorted(str(w) for w in t.workloads)), secret=t.secret_name,
            not_after=not_after, renew_at=renew_at, waiting=waiting.get(f"{t.namespace}/{t.secret_name}", ""),
            conditions=conditions(told, not_after=not_after, renew_at=renew_at),
            names_problem=t.namelessness() or t.refusal())
        before = held.get((t.namespace, t.secret_name))
        found.append(before if before == status else status)
    return found


def conditions(told: Mapping[str, str], *, not_after: datetime | None,
               renew_at: datetime | None) -> tuple[Condition, ...]:
    """`Ready` from what was told (reason -> message) and the stored certificate's dates; then the rest.
    A certificate whose every name was refused is not held back: it is issued naming no Service (its
    NoServiceName condition says so), as discover.Target.namelessness tells."""
    stop = next((reason for reason in NOT_READY if reason in told), None) if told else None
    if stop is not None:
        ready = Condition("Ready", "False", stop, told[stop])
    elif not_after is None:
        ready = Condition("Ready", "False", "NotIssued", NOT_ISSUED)
    else:
        ready = _issued(not_after, renew_at)
    if not told:  # most certificates: their dates alone say what they are
        return (ready,)
    beside = [Condition(reason, "True", reason, told[reason]) for reason in BESIDE
              if reason in told and reason != ready.reason]
    return (ready, *beside)


@functools.lru_cache(maxsize=4096)
def _issued(not_after: datetime, renew_at: datetime | None) -> Condition:
    """`Ready` of an issued certificate, one (immutable) object for the many certificates with the same dates:
    a pass issuing 100,000 leaves gives them a few hundred distinct seconds; 4,096 holds a day's issues
    at one a minute (each ~0.3 KiB)."""
    renewal = f"; renewed from {renew_at:%Y-%m-%d %H:%M} UTC" if renew_at else ""
    return Condition("Ready", "True", "Issued", f"issued, valid until {not_after:%Y-%m-%d %H:%M} UTC{renewal}")


def pod_statuses(pods: Iterable[Obj]) -> list[PodStatus]:
    return [PodStatus(namespace=p["metadata"].get("namespace") or "", name=p["metadata"]["name"],
                      workload=pod_workload_name(p["metadata"])) for p in pods]


def aborted(previous: Status | None, why: str, now: datetime) -> Status:
    """A pass that stopped keeps what the last complete one saw, saying that it stopped and when."""
    if previous is None:
        return Status(pass_at=now, converged=False, aborted=why, cas=(), workloads=(), pods_missing_injection=())
    return replace(previous, pass_at=now, converged=False, aborted=why)

