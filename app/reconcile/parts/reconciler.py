"""A reconcile pass: one reading of the cluster, then the three passes of docs/reconcile.md, in order:
workload certificates and bundles (`converge_workloads`), the pod-certificate signer
(`PodCertificateSigner.converge`) and the webhook's certificate and caBundle (`WebhookPass.converge`).

Reads first and writes only what the plan says; a 409 re-reads that one object and decides again. An
object that fails is reported and the pass goes on; an unreachable API (or a lost lease) stops the pass,
because nothing that follows could be trusted or written.

The Reconciler composes parts, each an object holding only its own state and handed what it uses: the
announcer (Events, conditions), the writer (writes, backoff), the findings (what a pass says), the CA
keeper (the CA sets, what a pass signs with), the member side or the hub side (built only where that
role runs) and the webhook's own pass. None reaches into another's fields.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from tls_injector import names
from tls_injector.kube import CONFIG_MAPS, NAMESPACES, SECRETS, KubeApi, KubeError, Resource
from tls_injector.pki import CaSet
from tls_injector.reconcile.ca.machine import CaUnusable, load_ca_set
from tls_injector.reconcile.core.budget import TurnBudget
from tls_injector.reconcile.core.discover import (
    enabled_namespaces,
    missing_injection,
)
from tls_injector.reconcile.core.events import Outbox
from tls_injector.reconcile.core.inputs import CLIENT_PREFIX, Observed, Signing
from tls_injector.reconcile.core.keypool import KeyPool
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Item, Obj
from tls_injector.reconcile.core.plan import plan
from tls_injector.reconcile.core.read import read_candidate_pods, read_cluster
from tls_injector.reconcile.native import signer
from tls_injector.reconcile.parts import status as st
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.members import HubSide, MemberSide
from tls_injector.reconcile.parts.reports import Expiries, Findings
from tls_injector.reconcile.parts.signer_pass import PodCertificateSigner
from tls_injector.reconcile.parts.state import (
    NotLeader,
    PassReport,
    ReconcileSettings,
    WorkloadsPassed,
    collector_paused,
    read_optional,
)
from tls_injector.reconcile.parts.targets import TargetFinder
from tls_injector.reconcile.parts.trust import CaKeeper
from tls_injector.reconcile.parts.webhook_pass import WebhookPass
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings
from tls_injector.reconcile.parts.writes import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    MAX_ATTEMPTS,
    UNAVAILABLE_STREAK,
    Writer,
)

# What callers import from here, as before the layers were split out.
__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "MAX_ATTEMPTS", "UNAVAILABLE_STREAK", "NotLeader", "PassReport",
           "ReconcileSettings", "Reconciler", "WorkloadsPassed", "collector_paused"]

log = logging.getLogger("tls_injector.reconcile")


# A keyed pass that only a full pass can replace (reconciler.run_namespaces_pass): not a failure.
_NEEDS_FULL = "a full pass is needed"


class PassCache(Protocol):
    """What a pass needs of the loop's cache (loop/cache.py, ClusterCache): what the Writer needs of it
    (writes.WriteCache), and the objects a pass decides on, as read.read_cluster would list them (all, or
    only some namespaces'). A protocol, so the pass never imports the loop that runs it."""

    def writing(self, kind: str, key: tuple[str, str]) -> AbstractContextManager[object]: ...

    def assume(self, kind: str, key: tuple[str, str], stored: Obj | None, *, was: str) -> Obj | None: ...

    def observed(self, namespaces: Iterable[str] | None = None) -> Observed: ...

    def pending_requests(self, resource: Resource) -> list[Obj] | None: ...


class _FullPassNeeded(Exception):
    """A keyed pass met what only a full pass decides."""


def _after(observed: Observed, stored: dict[tuple[str, str, str], Obj | None]) -> Observed:
    """What the pass read with what it wrote over it (`stored`: each planned object as the pass left it,
    None when deleted): the leaves and bundles the next pass will read."""
    leaves, bundles = dict(observed.leaves), dict(observed.bundles)
    for (kind, ns, name), obj in stored.items():
        if kind == SECRETS.kind:
            target: dict[Any, Obj] = leaves
            key: Any = (ns, name)
        elif kind == CONFIG_MAPS.kind and name == names.TRUST_BUNDLE_CONFIGMAP:
            target, key = bundles, ns
        else:
            continue
        if obj is None:
            target.pop(key, None)
        else:
            target[key] = obj
    return dataclasses.replace(observed, leaves=leaves, bundles=bundles)


class Reconciler:
    """The passes of docs/reconcile.md, composed of the parts above (announcer, writer, findings, CA keeper,
    member or hub side, the webhook's pass), each handed what it uses."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, *, metrics: ReconcileMetrics | None = None,
                 may_write: Callable[[], bool] = lambda: True,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.api = api
        # Built by the command and handed down whole (read-only here: each part holds the same ones).
        self._settings = settings
        self._metrics = metrics = metrics or ReconcileMetrics()
        self.clock = clock
        self.native = signer.NativeApis(api, mode=settings.pod_certificates)
        # What the last full pass saw, for the status API (tls_injector.reconcile.parts.status); swapped in whole.
        self.status: st.Status | None = None
        # The loop's keys made ahead (keypool.py; the controller starts its thread); None: made at the call.
        self.keys: KeyPool | None = None
        # The long-running loop's cache (app/reconcile/loop/cache.py): a pass reads it instead of listing, and
        # our writes go into it at once. None for `reconcile --once` and the other one-shot commands.
        self._cache: PassCache | None = None
        self.announcer = Announcer(api)
        self.writer = Writer(api, metrics, self.announcer, namespace=settings.namespace, may_write=may_write)
        self.findings = Findings(metrics, self.announcer, per_object_metrics=settings.per_object_metrics)
        self.keeper = CaKeeper(api, settings, metrics, self.writer, self.announcer)
        # Each side of federation only where its role runs: a hub has members, every other reconciler may be one.
        self.hub = HubSide(api, settings, metrics, self.announcer, clock=clock,
                           guard=self.writer.guard) if settings.hub else None
        self.member = None if settings.hub else MemberSide(api, settings, metrics)
        self.webhook = WebhookPass(api, settings, metrics, self.writer, self.keeper)
        self.targets = TargetFinder(api, settings, metrics, self.findings, self.announcer)
        self.pod_signer = PodCertificateSigner(api, settings, metrics, self.native, guard=self.writer.guard)
        self._seen: tuple[list[st.WorkloadStatus], list[st.PodStatus]] | None = None
        self._native_served = False  # whether the cluster served pod certificates at the last full pass

    @property
    def settings(self) -> ReconcileSettings:
        return self._settings

    @property
    def metrics(self) -> ReconcileMetrics:
        return self._metrics

    @property
    def cache(self) -> PassCache | None:
        return self._cache

    def attach(self, cache: PassCache | None, outbox: Outbox | None = None) -> None:
        """The loop's cache (a pass reads it; our writes go into it) and its Events' outbox."""
        self._cache = cache
        self.writer.use_cache(cache)
        self.pod_signer.use_cache(cache.pending_requests if cache is not None else None)
        self.announcer.use_outbox(outbox)

    def retries(self, namespaces: set[str] | None = None) -> dict[str, datetime]:
        """When the next write of each of `namespaces` (None: any) that failed may be tried again."""
        return self.writer.retries(namespaces)

    def rotating(self) -> bool:
        """A CA set of the last full pass is mid-rotation (CaKeeper.rotating)."""
        return self.keeper.rotating()

    def run_pass(self) -> PassReport:
        """Workloads, their CA and bundles, then the webhook's own certificate when configured."""
        now = self.clock()
        self.keeper.begin()
        if self.hub is not None:
            self.hub.begin()
        report = self._guarded(self._pass)
        seen, self._seen = self._seen, None  # set by a pass that got as far as the workloads
        if seen is None:
            self.status = st.aborted(self.status, report.aborted, now)
        else:
            workloads, pods = seen
            if not report.aborted:
                self.metrics.last_complete_pass.set(now.timestamp())
            cas = [ca for name, step in self.keeper.steps.items() for ca in st.ca_statuses(name, step)]
            visited = self.hub.members if self.hub is not None else {}
            members = tuple(st.MemberStatus(name, not problem, problem) for name, problem in visited.items())
            self.status = st.Status(pass_at=now, converged=report.converged, aborted=report.aborted,
                                    cas=tuple(cas), workloads=tuple(workloads), pods_missing_injection=tuple(pods),
                                    members=members)
        return report

    def run_namespaces_pass(self, namespaces: set[str], *, last: set[str] | frozenset[str] = frozenset()
                            ) -> PassReport | None:
        """A keyed pass: only the certificate Secrets and bundles of `namespaces`, decided from the cache on
        the CA sets as the last full pass stepped them (no CA set is stepped here: that needs the facts of
        every namespace). None when only a full pass can decide: none ran yet, or a workload here asks for
        a client certificate while no client CA set exists. The certificates of `last` (namespaces the
        previous turn left over, budget.py) are decided after the others."""
        if self._cache is None or self.keeper.signing is None:
            return None
        report = self._guarded(lambda report, now: self._namespaces_pass(namespaces, report, now, last),
                               keyed=True)
        return None if report.aborted == _NEEDS_FULL else report

    def _namespaces_pass(self, namespaces: set[str], report: PassReport, now: datetime,
                         last: set[str] | frozenset[str] = frozenset()) -> None:
        assert self._cache is not None
        assert self.keeper.signing is not None
        observed = self._cache.observed(namespaces)
        targets = self.targets.find(observed, self._native_served, report, now)
        targets.sort(key=lambda t: t.namespace in last)  # stable: the rest in their order
        signing = self.keeper.signing
        client = None if signing.client is None else dataclasses.replace(signing.client, now=now, opened={})
        if client is None and any(t.client_wanted for t in targets):
            raise _FullPassNeeded(_NEEDS_FULL)
        # Its own seals (none kept) and its own budget per namespace.
        signing = dataclasses.replace(signing, now=now, client=client, opened={}, budget=self._turn_budget(),
                                      keys=self.keys)
        found = Expiries({(t.namespace, t.secret_name): t for t in targets}, signing)
        self.writer.converge_all(((item, observed.lookup(item)) for item in plan(targets, observed, signing)), report,
                                 now, found.note, signing.budget)
        expiries = found.leaves
        if self.status is not None:  # the status API's workloads of these namespaces, as this pass left them
            kept = tuple(w for w in self.status.workloads if w.namespace not in namespaces)
            fresh = st.workload_statuses([*targets, *self.targets.refused], expiries, report.waiting,
                                         self.announcer.facts, found.renewals,
                                         previous=(w for w in self.status.workloads if w.namespace in namespaces))
            self.status = dataclasses.replace(self.status, workloads=kept + tuple(fresh))

    def forget(self) -> None:
        """Drop what the last pass saw (status and gauges): this replica no longer leads."""
        self.status = None
        self.keeper.forget()
        self.metrics.forget()
        self.announcer.forget()  # and issuance its outbox still holds is not told after the window

    def run_signer_pass(self) -> PassReport:
        """Only the pending pod certificate requests, signed by the CA set as stored: what the loop runs
        when nothing but a request changed, so a pod waits for a few reads rather than a full pass (which
        takes seconds to tens of seconds on thousands of workloads). The CA set is not stepped and the
        bundle not written here; the next full pass does both."""
        return self._guarded(self._signer_pass)

    def _signer_pass(self, report: PassReport, now: datetime) -> None:
        def cas() -> CaSet:  # a member's intermediate as the last full pass found it (never in the CA Secret)
            stored = read_optional(self.api, SECRETS, self.settings.ca.secret_name, self.settings.namespace)
            intermediate = self.member.ca("serving") if self.member is not None else None
            return load_ca_set(stored, user_ca=self.keeper.user_ca(now, "serving") or intermediate)

        def observed() -> Observed:
            if self._cache is not None:
                return self._cache.observed()
            found = Observed()
            selector = f"{names.INJECT_LABEL}={names.NAMESPACE_OPT_IN}"
            found.enabled = enabled_namespaces(self.api.list_objects(NAMESPACES, label_selector=selector).items)
            found.pods = read_candidate_pods(self.api, found.enabled)
            return found

        self.pod_signer.requests_only(report, now, cas=cas, observed=observed)

    def run_webhook_pass(self, ws: WebhookSettings) -> PassReport:
        """Only the webhook's serving certificate and caBundle (what `tls-injector bootstrap` does)."""
        return self._guarded(lambda report, now: self.webhook.converge(ws, report, now))

    def _guarded(self, work: Callable[[PassReport, datetime], object], *, keyed: bool = False) -> PassReport:
        """Run one pass; `keyed`: a pass of a few namespaces, which sees only their conditions and counts."""
        report, started, now = PassReport(), time.monotonic(), self.clock()
        self.announcer.begin()
        try:
            with collector_paused():
                work(report, now)
        except _FullPassNeeded as e:
            report.aborted = str(e)
            return report
        except (KubeError, CaUnusable, NotLeader, ValueError) as e:
            report.aborted = f"{type(e).__name__}: {e}"
            self.metrics.failures.labels("pass-aborted").inc()
            log.error("reconcile pass stopped", extra={"error": report.aborted})
        self.writer.tell_issued(report, now)  # an aborted pass's certificates too: they are stored
        # A pass ends with its Events written; an aborted pass saw only part of its conditions, and a keyed
        # pass only those of its namespaces (the next full pass forgets the ended ones).
        self.announcer.end(complete=not (report.aborted or keyed))
        self.metrics.duration.observe(time.monotonic() - started)
        if not keyed:  # the gauges count the whole cluster: a full pass sets them
            self.metrics.conflicts.set(len(report.conflicts))
            self.metrics.waiting.set(len(report.waiting))
        log.info("reconcile pass done", extra={"keyed": keyed, "writes": dict(report.writes),
                                               "conflicts": len(report.conflicts),
                                               "names_refused": len(report.names_refused),
                                               "clients_refused": len(report.clients_refused),
                                               "oversized": len(report.oversized), "nameless": len(report.nameless),
                                               "failed": len(report.failed), "waiting": len(report.waiting),
                                               "deferred": sorted(report.deferred)[:10],
                                               "converged": report.converged})
        return report

    def _pass(self, report: PassReport, now: datetime) -> None:
        """A full pass: the three passes of docs/reconcile.md, on one reading of the cluster."""
        # Requests before pods: a request's pod was created before it, so it is in the pod list read next.
        native = self.pod_signer.observe()
        observed = self._cache.observed() if self._cache is not None else read_cluster(self.api)
        workloads = self.converge_workloads(observed, native, report, now)
        if self.hub is not None:
            self.hub.converge_members(report, self.keeper.steps)
        if native is not None:
            self.pod_signer.converge(native, workloads.cas, observed, report, now)
        missing = missing_injection(observed.pods, enabled=observed.enabled, own_namespace=self.settings.namespace)
        self.metrics.missing_injection.set(len(missing))
        self._seen = (st.workload_statuses([*workloads.targets, *self.targets.refused], workloads.expiries,
                                           report.waiting, self.announcer.facts, workloads.renewals,
                                           previous=self.status.workloads if self.status is not None else ()),
                      st.pod_statuses(missing))
        if self.settings.webhook is not None:
            configs = self.webhook.converge(self.settings.webhook, report, now)
            self.metrics.serving_verdict = self.webhook.served_verdict(self.settings.webhook, configs, now)

    def converge_workloads(self, observed: Observed, native: signer.NativeView | None, report: PassReport,
                           now: datetime) -> WorkloadsPassed:
        """Workload certificates and bundles: discover the Secrets the cluster needs, step the workload CA
        on the bundles and leaves in use, then plan and write every leaf Secret and trust bundle. Returns
        the CA set as stepped (the pod-certificate signer signs with it), the Secrets and their expiries."""
        targets = self.targets.find(observed, native is not None, report, now)
        # Before anything is stepped or written: a user CA that cannot be used stops the pass here.
        keeper, member, hub = self.keeper, self.member, self.hub
        users = keeper.read_user_cas(now)
        if member is not None:
            member.read(report, now, user_roles=users)
        if hub is not None:
            hub.read()
        step, namespaces = keeper.ensure_ca(observed, targets, now, report, native=native,
                                            intermediate=member.ca("serving") if member is not None else None,
                                            gate=hub.gate("serving", now) if hub is not None else None)
        if member is not None:
            member.stepped("serving", namespaces)
        self.findings.ca_metrics(step.cas)
        if step.waiting:
            log.warning("no CA may sign yet: certificates that need one wait", extra={"reason": step.waiting})
        stored: dict[tuple[str, str, str], Obj | None] = {}
        signing = Signing.of(step.cas, now=now, waiting=step.waiting,
                             anchors=member.roots("serving") if member is not None else ())
        self.metrics.client_ca_expiry.clear()
        # The client CA set only once a workload asks for it, or in a hub, where it is the client root.
        if any(t.client_ids for t in targets) or self.settings.hub:
            client, namespaces = keeper.ensure_client_ca(
                observed, targets, now, report, intermediate=member.ca("client") if member is not None else None,
                gate=hub.gate("client", now) if hub is not None else None)
            if member is not None:
                member.stepped("client", namespaces)
            self.findings.ca_metrics(client.cas, client=True)
            signing = dataclasses.replace(signing, client=Signing.of(
                client.cas, now=now, waiting=client.waiting, prefix=CLIENT_PREFIX,
                anchors=member.roots("client") if member is not None else ()))
        # Kept for keyed passes without this pass's opened seals (~100,000 of them at 100,000 workloads).
        keeper.keep(dataclasses.replace(signing, opened={}, client=signing.client and dataclasses.replace(
            signing.client, opened={})))
        signing = dataclasses.replace(signing, budget=self._turn_budget(), keys=self.keys)
        self._native_served = native is not None
        found = Expiries({(t.namespace, t.secret_name): t for t in targets}, signing)

        federated = member is not None and member.federated

        def done(item: Item, obj: Obj | None) -> None:
            if federated:  # a member's report reads what the pass left
                stored[item.key] = obj
            found.note(item, obj)

        self.writer.converge_all(((item, observed.lookup(item)) for item in plan(targets, observed, signing)), report,
                                 now, done, signing.budget)
        if member is not None and federated:
            member.report_roots(_after(observed, stored), targets, native, report, now, facts=keeper.facts)
        self.findings.cert_metrics(found)
        expiries = found.leaves
        self.metrics.not_issued.set(sum((t.namespace, t.secret_name) not in expiries for t in targets))
        return WorkloadsPassed(step.cas, targets, expiries, found.renewals)

    def _turn_budget(self) -> TurnBudget | None:
        """A fresh budget per namespace for a pass of the loop (budget.py); None for a one-shot pass."""
        seconds = self.settings.turn_seconds
        return None if seconds is None else TurnBudget(seconds)








