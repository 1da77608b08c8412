"""`tls-injector status`: one workload's certificate as the cluster holds it, or the attention list for all,
read straight from the API (no reconciler, no leader, no port-forward).

The same reads and discovery as the reconciler (`read_cluster`, `discover`), so the status and a pass never
disagree about which Secret a workload gets. Its conditions are those of the status API
(tls_injector.reconcile.parts.status.conditions), from the same facts: the objects in the way and the names refused are
read from the cluster as the pass finds them; a wait or a refused write is known only from the Warning
Event the pass raised, so those count when raised after the certificate now stored was issued (its
`not_before` and the backdating every leaf gets: the issuance itself is told by one Event per namespace and
pass, which names at most a page of Secrets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson

from tls_injector import names
from tls_injector.doctor.read import read_workloads
from tls_injector.doctor.snapshot import DoctorSettings, Snapshot
from tls_injector.doctor.workloads import targets
from tls_injector.injection import pod_workload, tls_change
from tls_injector.injection.profile import parse_note
from tls_injector.kube import EVENTS, SECRETS, KubeApi, NotFound, Obj
from tls_injector.pki import (
    BACKDATE,
    LEAF_LOOKAHEAD,
    LEAF_VALIDITY,
    CaSet,
    CaState,
    dns_sans,
    load_certificates,
    renewal_time,
)
from tls_injector.reconcile.ca.machine import CaUnusable, load_ca_set
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.discover import Target, missing_injection
from tls_injector.reconcile.core.objects import secret_data
from tls_injector.reconcile.parts import status as st
from tls_injector.web.page import attention_items

# Events shown for one workload: the latest, as `kubectl describe` does; a workload whose certificate
# was renewed every hour for a year has thousands, which a person does not read.
EVENTS_SHOWN = 10
# The namespace's Event for the certificates a pass issued or renewed there (on its trust bundle): shown for
# a workload when it names the workload's Secret.
ISSUED_REASON = "CertificatesIssued"
# Reasons known from Events alone (the others are read from the cluster itself).
TOLD_BY_EVENTS = ("CertificateWaiting", "CertificateFailed")


class NoSuchWorkload(Exception):
    """No opted-in workload of that name in that namespace (or several of different kinds)."""


@dataclass(frozen=True)
class Certificate:
    names: tuple[str, ...]
    not_before: datetime
    not_after: datetime
    renew_at: datetime
    issuer: str
    serial: str


@dataclass(frozen=True)
class CaInfo:
    fingerprint: str  # the first 16 hex digits, as on the status page and in the metrics
    subject: str
    state: str
    signs: bool


@dataclass(frozen=True)
class TlsException:
    """A workload whose pod template names a TLS change (tls-injector.io/tls-change), as written: the
    sanctioned exception it was, or may be, updated with (docs/rules.md, "Exceptions")."""

    workload: str  # Kind/name
    change: str  # "<old>-><new>"


@dataclass(frozen=True)
class WorkloadReport:
    namespace: str
    workloads: tuple[str, ...]
    secret: str
    secret_state: str  # "ours", "not ours" (someone else's Secret of that name) or "missing"
    certificate: Certificate | None
    ca: CaInfo | None  # the CA of the set the certificate chains to (by the issuer annotation)
    conditions: tuple[st.Condition, ...]
    pods: tuple[tuple[str, bool], ...]  # (name, carries the injection)
    events: tuple[dict[str, str], ...] = field(default=())
    # What the attention list says of this certificate's dates: ending within EXPIRING_WITHIN, or past its
    # renewal time. Ready stays True (the certificate is valid and in place), yet the workload needs a look.
    attention: tuple[str, ...] = field(default=())
    tls_exceptions: tuple[TlsException, ...] = field(default=())

    @property
    def ready(self) -> bool:
        return self.conditions[0].status == "True"

    @property
    def troubled(self) -> bool:
        return not self.ready or len(self.conditions) > 1


@dataclass
class Cluster:
    """What `status` reads once: the reconciler's own reading and discovery (as `doctor` reads them), the
    CA set; the Events are read per workload."""

    api: KubeApi
    snap: Snapshot
    cas: CaSet

    @property
    def now(self) -> datetime:
        return self.snap.now

    @property
    def namespace(self) -> str:
        return self.snap.settings.namespace


def read_status(api: KubeApi, settings: DoctorSettings, *, now: datetime) -> Cluster:
    snap = Snapshot(settings, now)
    read_workloads(api, snap)
    try:
        cas = load_ca_set(_optional(api, settings.ca_secret, settings.namespace))
    except CaUnusable:  # someone else's Secret of that name: no CA of ours to show (doctor says more)
        cas = CaSet()
    return Cluster(api, snap, cas)


def target_of(cluster: Cluster, namespace: str, workload: str) -> Target:
    """The Secret `namespace/workload` gets, by the reconciler's own discovery on what was read."""
    return find_target(targets(cluster.snap), namespace, workload)


def find_target(wanted: Sequence[Target], namespace: str, workload: str) -> Target:
    """The Secret `namespace/workload` gets: `workload` is a name, or Kind/name where names clash."""
    kind, _, name = workload.rpartition("/")
    found = [t for t in wanted if t.namespace == namespace and any(
        w.name == name and (not kind or w.kind.lower() == kind.lower()) for w in t.workloads)]
    if not found:
        raise NoSuchWorkload(f"no opted-in workload {namespace}/{workload} (a Deployment, StatefulSet, DaemonSet, "
                             "Job, CronJob or bare Pod that opted in)")
    if len(found) > 1:
        kinds = sorted({str(w) for t in found for w in t.workloads if w.name == name})
        raise NoSuchWorkload(f"{namespace}/{workload} names several workloads; give the kind: {', '.join(kinds)}")
    return found[0]


def report(cluster: Cluster, target: Target) -> WorkloadReport:
    secret = cluster.snap.secret(target.namespace, target.secret_name)
    ours = own.is_owned(secret, "leaf")
    certificate = _certificate(secret) if ours else None
    events = workload_events(cluster.api, target)
    told = told_by(target, secret, cluster.snap.observed.squatted, events)
    valid = certificate if certificate is not None and certificate.not_after > cluster.now else None
    conditions = st.conditions(told, not_after=valid.not_after if valid else None,
                               renew_at=valid.renew_at if valid else None)
    pods = tuple((p["metadata"]["name"], names.INJECTED_ANNOTATION in (p["metadata"].get("annotations") or {}))
                 for p in cluster.snap.observed.pods if _runs(p, target))
    found = WorkloadReport(namespace=target.namespace, workloads=tuple(sorted(str(w) for w in target.workloads)),
                           secret=target.secret_name, secret_state=secret_state(secret), certificate=certificate,
                           ca=_ca(cluster.cas, secret) if ours else None, conditions=conditions, pods=pods,
                           events=tuple(events[-EVENTS_SHOWN:]), tls_exceptions=tls_exceptions(cluster.snap, target))
    return replace(found, attention=tuple(text for _, text in _attention([_status_of(found, target)], cluster.now)))


def tls_exceptions(snap: Snapshot, target: Target) -> tuple[TlsException, ...]:
    """The TLS changes the target's workloads name in their pod templates, from the workloads already read."""
    wanted = {(w.kind, w.name) for w in target.workloads}
    found = []
    for kind, obj in snap.observed.workloads:
        meta = obj.get("metadata") or {}
        if (meta.get("namespace") or "") != target.namespace or (kind, meta.get("name")) not in wanted:
            continue
        if (change := tls_change(kind, obj)) is not None:
            found.append(TlsException(f"{kind}/{meta.get('name')}", change))
    return tuple(sorted(found, key=lambda e: e.workload))


def _status_of(found: WorkloadReport, target: Target) -> st.WorkloadStatus:
    """One workload as the status API records it (what the attention list reads)."""
    cert = found.certificate
    return st.WorkloadStatus(
        namespace=found.namespace, workloads=found.workloads, secret=found.secret,
        not_after=cert.not_after if cert else None, renew_at=cert.renew_at if cert else None,
        waiting=next((c.message for c in found.conditions if c.reason == "CertificateWaiting"), ""),
        conditions=found.conditions, names_problem=target.namelessness() or target.refusal())


def _attention(workloads: list[st.WorkloadStatus], now: datetime) -> list[tuple[str, str]]:
    """The page's attention items of these certificates' dates: expiring, overdue (the "crit" ones)."""
    status = st.Status(pass_at=now, converged=True, aborted="", cas=(), workloads=tuple(workloads),
                       pods_missing_injection=())
    return [item for item in attention_items(status, now) if item[0] == "crit"]  # type: ignore[arg-type]


def told_by(target: Target, secret: Obj | None, squatted: set[str], events: Sequence[dict[str, str]]) -> dict[str, str]:
    """reason -> message, as a pass would tell it: from the cluster, and from the Events since the stored
    certificate was issued for what only Events know."""
    told: dict[str, str] = {}
    if secret is not None and not own.is_owned(secret, "leaf"):
        told["SecretConflict"] = (f"Secret {target.namespace}/{target.secret_name} exists and is not managed by "
                                  "tls-injector")
    if target.refused:
        told["ServiceNamesRefused"] = target.refusal()
    if target.profile_problems:
        told["ProfileRefused"] = target.profile_refusal()
    if not target.dns_names:
        told["NoServiceName"] = target.namelessness()
    if target.namespace in squatted:
        told["TrustBundleExcluded"] = (f"ConfigMap {target.namespace}/{names.TRUST_BUNDLE_CONFIGMAP} exists and is "
                                       "not managed by tls-injector")
    stored = _certificate(secret) if secret is not None and own.is_owned(secret, "leaf") else None
    issued = f"{stored.not_before + BACKDATE:%Y-%m-%dT%H:%M:%SZ}" if stored is not None else ""
    for event in events:
        if event["reason"] in TOLD_BY_EVENTS and event["time"] >= issued:
            told[event["reason"]] = event["message"]  # the latest wins: events are in time order
    return told


def workload_events(api: KubeApi, target: Target) -> list[dict[str, str]]:
    """The Events on the target's workloads, and those of the namespace that name its Secret as issued or
    renewed, oldest first: time, type, reason, message."""
    wanted = {(w.kind, w.name) for w in target.workloads}
    named = f"Secret {target.secret_name}: "
    found = []
    for e in api.list_objects(EVENTS, namespace=target.namespace).items:
        involved = e.get("involvedObject") or {}
        issued = (e.get("reason") == ISSUED_REASON and involved.get("kind") == "ConfigMap"
                  and f" {named}" in str(e.get("message") or "").replace(";", " "))
        if (involved.get("kind"), involved.get("name")) in wanted or issued:
            when = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp") or ""
            found.append({"time": str(when), "type": str(e.get("type") or ""), "reason": str(e.get("reason") or ""),
                          "message": str(e.get("message") or "")})
    return sorted(found, key=lambda e: e["time"])


def summary(cluster: Cluster) -> tuple[list[tuple[str, str]], bool]:
    """(severity, text) for everything that needs attention, ordered as the status page orders it; and
    whether every certificate is Ready (doctor fails a run with a certificate missing or not ours)."""
    snap = cluster.snap
    workloads = []
    for target in targets(snap):
        workloads.append(_status_of(report(cluster, target), target))
    missing = missing_injection(snap.observed.pods, enabled=snap.observed.enabled, own_namespace=cluster.namespace)
    status = st.Status(pass_at=cluster.now, converged=True, aborted="", cas=tuple(_rotating(cluster)),
                       workloads=tuple(workloads), pods_missing_injection=tuple(st.pod_statuses(missing)))
    # The page reads the API's models by attribute; the snapshot's dataclasses carry the same fields (a test
    # of tests/operator holds them to it), so the page's own ordering serves here without pydantic.
    ready = all(w.conditions[0].status == "True" for w in workloads)
    return attention_items(status, cluster.now), ready  # type: ignore[arg-type]


def render_report(found: WorkloadReport) -> str:
    cert, ca = found.certificate, found.ca
    lines = [f"Workload: {found.namespace}/{', '.join(found.workloads)}",
             f"Secret: {found.namespace}/{found.secret} ({found.secret_state})"]
    if cert is not None:
        lines += [f"Certificate: serial {cert.serial}, issued by {cert.issuer}",
                  f"  DNS names: {', '.join(cert.names) or '-'}",
                  f"  Valid: {cert.not_before:%Y-%m-%d %H:%M} UTC to {cert.not_after:%Y-%m-%d %H:%M} UTC; renewal "
                  f"from {cert.renew_at:%Y-%m-%d %H:%M} UTC"]
    if ca is not None:
        lines.append(f"CA: {ca.fingerprint} {ca.subject}, {ca.state}{' (signs)' if ca.signs else ''}")
    lines.append("Conditions:")
    lines += [f"  {c.type}: {c.status} ({c.reason}) {c.message}" for c in found.conditions]
    lines += [f"Attention: {text}" for text in found.attention]
    lines += [f"TLS exception: {e.change} ({e.workload}, {names.TLS_CHANGE_ANNOTATION})" for e in found.tls_exceptions]
    lines.append("Pods:" + ("" if found.pods else " none"))
    lines += [f"  {name}: {'injected' if injected else 'WITHOUT the injection: restart its workload'}"
              for name, injected in found.pods]
    lines.append("Events:" + ("" if found.events else " none"))
    lines += [f"  {e['time']} {e['type']} {e['reason']}: {e['message']}" for e in found.events]
    return "\n".join(lines) + "\n"


def render_summary(items: Sequence[tuple[str, str]]) -> str:
    if not items:
        return "Nothing needs attention: every certificate is issued and current, and no pod misses the injection.\n"
    return "".join(f"{'✖' if level == 'crit' else '⚠'} {text}\n" for level, text in items)


def to_json(value: WorkloadReport | Sequence[tuple[str, str]]) -> str:
    body: Any
    if isinstance(value, WorkloadReport):
        body = {**asdict(value), "ready": value.ready}
    else:
        body = {"attention": [{"severity": "error" if level == "crit" else "warning", "message": text}
                              for level, text in value]}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


def secret_state(secret: Obj | None) -> str:
    return "missing" if secret is None else "ours" if own.is_owned(secret, "leaf") else "not ours"


def serial(secret: Obj | None) -> str:
    found = _certificate(secret)
    return found.serial if found else ""


def renewed(api: KubeApi, namespace: str, name: str, before: str) -> str | None:
    """What `renew` waits for: a certificate of another serial, the force-renew annotation gone; None until."""
    secret = _optional(api, name, namespace)
    annotations = ((secret or {}).get("metadata") or {}).get("annotations") or {}
    found = _certificate(secret) if own.is_owned(secret, "leaf") else None
    if found is None or found.serial == before or names.FORCE_RENEW_ANNOTATION in annotations:
        return None
    return f"{found.serial} (valid until {found.not_after:%Y-%m-%d %H:%M} UTC)"


def _certificate(secret: Obj | None) -> Certificate | None:
    chain = load_certificates(secret_data(secret, keys=("tls.crt",)).get("tls.crt", b""))
    if not chain:
        return None
    leaf = chain[0]
    # Renewed as the profile it was issued with says (recorded on the Secret; none recorded: the built-in one).
    profile = parse_note(((secret or {}).get("metadata") or {}).get("annotations", {}).get(names.PROFILE_ANNOTATION))
    renew_before, duration = (profile.renew_before, profile.duration) if profile is not None else (LEAF_LOOKAHEAD,
                                                                                                   LEAF_VALIDITY)
    # As the reconciler decides: at the share of the life it got (one its CA's end cut short is due later).
    renew_at = renewal_time(leaf.not_valid_before_utc, leaf.not_valid_after_utc, lookahead=renew_before,
                            duration=duration, ca_end=chain[1].not_valid_after_utc if len(chain) > 1 else None)
    return Certificate(names=tuple(dns_sans(leaf)), not_before=leaf.not_valid_before_utc,
                       not_after=leaf.not_valid_after_utc, renew_at=renew_at,
                       issuer=leaf.issuer.rfc4514_string(), serial=format(leaf.serial_number, "x"))


def _ca(cas: CaSet, secret: Obj | None) -> CaInfo | None:
    issuer = ((secret or {}).get("metadata", {}).get("annotations") or {}).get(names.ISSUER_ANNOTATION, "")
    record = next((r for r in cas.records if issuer and r.fingerprint == issuer), None)
    if record is None:
        return None
    return CaInfo(fingerprint=record.fingerprint[:16], subject=record.cert.subject.rfc4514_string(),
                  state=str(record.state), signs=record.state is CaState.TRUSTED_USED and record.key is not None)


def _rotating(cluster: Cluster) -> list[st.CaStatus]:
    """CAs on their way in, as the page's rotation items need them."""
    return [st.CaStatus(ca_set=cluster.snap.settings.ca_secret, role="serving", fingerprint=r.fingerprint[:16],
                        subject=r.cert.subject.rfc4514_string(), root=not r.chain, not_after=r.cert.not_valid_after_utc,
                        state=str(r.state), signs=False, waits_for=st.WAITS_FOR[r.state], next_step_at=None)
            for r in cluster.cas.records if r.state in (CaState.UNTRUSTED, CaState.TRUSTED_UNUSED)]


def _runs(pod: Obj, target: Target) -> bool:
    meta = pod["metadata"]
    return (meta.get("namespace") or "") == target.namespace and any(
        pod_workload(meta).name == w.name for w in target.workloads)


def _optional(api: KubeApi, name: str, namespace: str) -> Obj | None:
    try:
        return api.get(SECRETS, name, namespace=namespace)
    except NotFound:
        return None


