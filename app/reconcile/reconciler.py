"""A reconcile pass: one reading of the cluster, then the three passes of docs/reconcile.md, in order:
workload certificates and bundles (`converge_workloads`), the pod-certificate signer
(`converge_pod_certificates`) and the webhook's certificate and caBundle (`converge_webhook`).

Reads first and writes only what the plan says; a 409 re-reads that one object and decides again. An
object that fails is reported and the pass goes on; an unreachable API (or a lost lease) stops the pass,
because nothing that follows could be trusted or written.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.kube import CONFIG_MAPS, NAMESPACES, SECRETS, SERVICE_ACCOUNTS, KubeError, NotFound
from tls_injector.kubenames import shown, subdomain_problem
from tls_injector.pki import CaSet
from tls_injector.reconcile import keystores, podcerts, signer
from tls_injector.reconcile import status as st
from tls_injector.reconcile.budget import TurnBudget
from tls_injector.reconcile.ca import CaUnusable, load_ca_set
from tls_injector.reconcile.discover import (
    Target,
    discover,
    enabled_namespaces,
    legal_targets,
    missing_injection,
    secret_users,
    trust_only_split,
    truststore_namespaces,
)
from tls_injector.reconcile.plan import CLIENT_PREFIX, Item, Obj, Observed, Signing, plan
from tls_injector.reconcile.profile import report_profiles
from tls_injector.reconcile.read import read_candidate_pods, read_cluster
from tls_injector.reconcile.reports import Expiries
from tls_injector.reconcile.state import NotLeader, PassReport, ReconcileSettings, WorkloadsPassed, collector_paused
from tls_injector.reconcile.webhook_pass import WebhookPass
from tls_injector.reconcile.webhook_plan import WebhookSettings
from tls_injector.reconcile.writes import BACKOFF_FIRST, BACKOFF_MAX, MAX_ATTEMPTS, UNAVAILABLE_STREAK

# What callers import from here, as before the layers were split out.
__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "MAX_ATTEMPTS", "UNAVAILABLE_STREAK", "NotLeader", "PassReport",
           "ReconcileSettings", "Reconciler", "WorkloadsPassed", "collector_paused"]

log = logging.getLogger("tls_injector.reconcile")


# A keyed pass that only a full pass can replace (reconciler.run_namespaces_pass): not a failure.
_NEEDS_FULL = "a full pass is needed"


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


class Reconciler(WebhookPass):
    """The passes of docs/reconcile.md, composed of the layers below (state, writes, reports, members, trust,
    the webhook's pass)."""

    def run_pass(self) -> PassReport:
        """Workloads, their CA and bundles, then the webhook's own certificate when configured."""
        self._steps, self._members, now = {}, {}, self.clock()
        # Keyed passes sign with what this pass steps; one that stops before (a user CA that cannot be
        # used, say) leaves them nothing to sign with, so they wait for a full pass that succeeds.
        self._signing = None
        report = self._guarded(self._pass)
        seen, self._seen = self._seen, None  # set by a pass that got as far as the workloads
        if seen is None:
            self.status = st.aborted(self.status, report.aborted, now)
        else:
            workloads, pods = seen
            if not report.aborted:
                self.metrics.last_complete_pass.set(now.timestamp())
            cas = [ca for name, step in self._steps.items() for ca in st.ca_statuses(name, step)]
            members = tuple(st.MemberStatus(name, not problem, problem) for name, problem in self._members.items())
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
        if self.cache is None or self._signing is None:
            return None
        report = self._guarded(lambda report, now: self._namespaces_pass(namespaces, report, now, last),
                               keyed=True)
        return None if report.aborted == _NEEDS_FULL else report

    def _namespaces_pass(self, namespaces: set[str], report: PassReport, now: datetime,
                         last: set[str] | frozenset[str] = frozenset()) -> None:
        assert self.cache is not None
        assert self._signing is not None
        observed = self.cache.observed(namespaces)
        targets = self._targets(observed, self._native_served, report, now)
        targets.sort(key=lambda t: t.namespace in last)  # stable: the rest in their order
        signing = self._signing
        client = None if signing.client is None else dataclasses.replace(signing.client, now=now, opened={})
        if client is None and any(t.client_wanted for t in targets):
            raise _FullPassNeeded(_NEEDS_FULL)
        # Its own seals (none kept) and its own budget per namespace.
        signing = dataclasses.replace(signing, now=now, client=client, opened={}, budget=self._turn_budget(),
                                      keys=self.keys)
        found = Expiries({(t.namespace, t.secret_name): t for t in targets}, signing)
        self.converge_all(((item, observed.lookup(item)) for item in plan(targets, observed, signing)), report, now,
                          found.note, signing.budget)
        expiries = found.leaves
        if self.status is not None:  # the status API's workloads of these namespaces, as this pass left them
            kept = tuple(w for w in self.status.workloads if w.namespace not in namespaces)
            fresh = st.workload_statuses([*targets, *self._refused_targets], expiries, report.waiting, self._facts,
                                         found.renewals)
            self.status = dataclasses.replace(self.status, workloads=kept + tuple(fresh))

    def forget(self) -> None:
        """Drop what the last pass saw (status and gauges): this replica no longer leads."""
        self.status, self._signing = None, None
        self.metrics.forget()

    def run_signer_pass(self) -> PassReport:
        """Only the pending pod certificate requests, signed by the CA set as stored: what the loop runs
        when nothing but a request changed, so a pod waits for a few reads rather than a full pass (which
        takes seconds to tens of seconds on thousands of workloads). The CA set is not stepped and the
        bundle not written here; the next full pass does both."""
        return self._guarded(self._signer_pass)

    def run_webhook_pass(self, ws: WebhookSettings) -> PassReport:
        """Only the webhook's serving certificate and caBundle (what `tls-injector bootstrap` does)."""
        return self._guarded(lambda report, now: self.converge_webhook(ws, report, now))

    def _guarded(self, work: Callable[[PassReport, datetime], object], *, keyed: bool = False) -> PassReport:
        """Run one pass; `keyed`: a pass of a few namespaces, which sees only their conditions and counts."""
        report, started, now = PassReport(), time.monotonic(), self.clock()
        self._lasting, self._facts = set(), {}
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
        self._tell_issued(report, now)  # an aborted pass's certificates too: they are stored
        if self.outbox is not None:
            self.outbox.flush()  # a pass ends with its Events written
        self.metrics.duration.observe(time.monotonic() - started)
        if not keyed:  # the gauges count the whole cluster: a full pass sets them
            self.metrics.conflicts.set(len(report.conflicts))
            self.metrics.waiting.set(len(report.waiting))
        # A condition that ended and starts again is announced again; an aborted pass saw only part of them,
        # and a keyed pass only those of its namespaces (the next full pass forgets the ended ones).
        self._told = self._lasting if not (report.aborted or keyed) else self._told | self._lasting
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
        native = signer.observe(self.api, self.native)
        observed = self.cache.observed() if self.cache is not None else read_cluster(self.api)
        workloads = self.converge_workloads(observed, native, report, now)
        if self.settings.hub:
            self.converge_members(report)
        if native is not None:
            self.converge_pod_certificates(native, workloads.cas, observed, report, now)
        missing = missing_injection(observed.pods, enabled=observed.enabled, own_namespace=self.settings.namespace)
        self.metrics.missing_injection.set(len(missing))
        self._seen = (st.workload_statuses([*workloads.targets, *self._refused_targets], workloads.expiries,
                                           report.waiting, self._facts, workloads.renewals),
                      st.pod_statuses(missing))
        if self.settings.webhook is not None:
            configs = self.converge_webhook(self.settings.webhook, report, now)
            self.metrics.serving_verdict = self._served_verdict(self.settings.webhook, configs, now)

    def converge_workloads(self, observed: Observed, native: signer.NativeView | None, report: PassReport,
                           now: datetime) -> WorkloadsPassed:
        """Workload certificates and bundles: discover the Secrets the cluster needs, step the workload CA
        on the bundles and leaves in use, then plan and write every leaf Secret and trust bundle. Returns
        the CA set as stepped (the pod-certificate signer signs with it), the Secrets and their expiries."""
        targets = self._targets(observed, native is not None, report, now)
        # Before anything is stepped or written: a user CA that cannot be used stops the pass here.
        self._user = self._user_cas(now)
        self._intermediates, self._ack_scope, self._held = self._read_intermediates(report, now), {}, {}
        self._acks, self._ack_problems = self._read_acks() if self.settings.hub else ({}, {})
        step = self._ensure_ca(observed, targets, now, report, native=native)
        self._ca_metrics(step.cas)
        if step.waiting:
            log.warning("no CA may sign yet: certificates that need one wait", extra={"reason": step.waiting})
        stored: dict[tuple[str, str, str], Obj | None] = {}
        signing = Signing.of(step.cas, now=now, waiting=step.waiting, anchors=self._roots("serving"))
        self.metrics.client_ca_expiry.clear()
        # The client CA set only once a workload asks for it, or in a hub, where it is the client root.
        if any(t.client_ids for t in targets) or self.settings.hub:
            client = self._ensure_client_ca(observed, targets, now, report)
            self._ca_metrics(client.cas, client=True)
            signing = dataclasses.replace(signing, client=Signing.of(client.cas, now=now, waiting=client.waiting,
                                                                     prefix=CLIENT_PREFIX,
                                                                     anchors=self._roots("client")))
        # Kept for keyed passes without this pass's opened seals (~100,000 of them at 100,000 workloads).
        self._signing = dataclasses.replace(signing, opened={}, client=signing.client and dataclasses.replace(
            signing.client, opened={}))
        signing = dataclasses.replace(signing, budget=self._turn_budget(), keys=self.keys)
        self._native_served = native is not None
        found = Expiries({(t.namespace, t.secret_name): t for t in targets}, signing)

        def done(item: Item, obj: Obj | None) -> None:
            if self._intermediates:  # a member's report reads what the pass left
                stored[item.key] = obj
            found.note(item, obj)

        self.converge_all(((item, observed.lookup(item)) for item in plan(targets, observed, signing)), report, now,
                          done, signing.budget)
        if self._intermediates:
            self._report_roots(_after(observed, stored), targets, native, report, now)
        self._cert_metrics(found)
        expiries = found.leaves
        self.metrics.not_issued.set(sum((t.namespace, t.secret_name) not in expiries for t in targets))
        return WorkloadsPassed(step.cas, targets, expiries, found.renewals)

    def _turn_budget(self) -> TurnBudget | None:
        """A fresh budget per namespace for a pass of the loop (budget.py); None for a one-shot pass."""
        seconds = self.settings.turn_seconds
        return None if seconds is None else TurnBudget(seconds)

    def _targets(self, observed: Observed, native_served: bool, report: PassReport, now: datetime) -> list[Target]:
        """The certificate Secrets the observed workloads and pods need (discover), with what is refused
        of them reported; fills in the observed namespaces' truststores, trust-only asks and keystores."""
        workloads, pods = observed.workloads, observed.pods
        if native_served:  # pod certificates served: who asked for them gets no Secret
            workloads, pods = secret_users(workloads, pods)
        observed.truststores = truststore_namespaces(workloads, pods, enabled=observed.enabled)
        # Who asked for trust alone gets no Secret; their namespaces get the bundle (names.MODE_TRUST_ONLY).
        workloads, pods, observed.trust_only = trust_only_split(workloads, pods, enabled=observed.enabled)
        targets = discover(workloads, pods, enabled=observed.enabled, cluster_domain=self.settings.cluster_domain,
                           services=observed.services, own_namespace=self.settings.namespace,
                           trust_domain=self.settings.trust_domain, profiles=self.settings.profiles)
        targets, self._refused_targets = legal_targets(targets)
        self._report_secret_names(self._refused_targets, report, now)
        targets = self._accounts_checked(targets)
        observed.keystores = self._keystores(workloads, pods, targets, observed=observed, report=report, now=now)
        self._report_refused_names(targets, report, now)
        report_profiles(targets, report.profiles_refused, self.metrics,
                        lambda t, m: self._announce(t.workloads, f"{t.namespace}/{t.secret_name}",
                                                    reason="ProfileRefused", message=m, now=now))
        self._report_oversized(observed, report, now)
        self._report_tls_changes(observed, now)
        return targets

    def _accounts_checked(self, targets: list[Target]) -> list[Target]:
        """A client certificate names its workload's service account (its SPIFFE ID): one that does not
        exist is no identity to vouch for, and whoever creates it later gets a certificate already made
        for that name. So that client certificate is refused (reported with the other client refusals,
        the rest go on), and one issued before is removed. One `get` per account asked for, per pass."""
        exists: dict[tuple[str, str], bool] = {}
        checked = []
        for target in targets:
            key = (target.namespace, target.client_ids[0].rsplit("/sa/", 1)[-1]) if target.client_wanted else None
            if key is not None and (why := subdomain_problem(key[1])):  # the pod spec's, as its author wrote it
                checked.append(target.client_refused(f"its service account {shown(key[1])} is no ServiceAccount "
                                                     f"name: {why}"))
                continue
            if key is not None and key not in exists:
                exists[key] = self._account_exists(*key)
            checked.append(target if key is None or exists[key] else target.client_refused(
                f"its service account {key[1]} does not exist in namespace {key[0]}; create it, or run the "
                "workload as one that exists"))
        return checked

    def _keystores(self, workloads: list[tuple[str, Obj]], pods: list[Obj], targets: list[Target], *,
                   observed: Observed, report: PassReport, now: datetime) -> dict[tuple[str, str], keystores.Keystore]:
        """The JVM keystores asked for, each password Secret read once (one `get` per name a pass); a
        keystore that cannot be made is reported and told on its workloads, the rest go on."""
        asks = keystores.keystore_asks(workloads, pods, enabled=observed.enabled)
        found = keystores.resolve(asks, read=self._read_password_secret, own_namespace=self.settings.namespace)
        for (namespace, secret), keystore in found.items():
            if keystore.problem:
                report.keystores_refused.append(keystore.problem)
                log.warning("keystore refused", extra={"namespace": namespace, "object": secret,
                                                       "reason": keystore.problem})
                refs = next((t.workloads for t in targets if (t.namespace, t.secret_name) == (namespace, secret)), ())
                self._announce(refs, f"{namespace}/{secret}", reason="KeystoreRefused", message=keystore.problem,
                               now=now)
        return found

    def _read_password_secret(self, namespace: str, name: str) -> tuple[Obj | None, str]:
        try:
            return self.api.get(SECRETS, name, namespace=namespace), ""
        except NotFound:
            return None, ""
        except KubeError as e:
            return None, str(e)[:200]

    def _account_exists(self, namespace: str, name: str) -> bool:
        """False only when the API confirmed it missing: an API error keeps what is issued (one failed read
        must not remove every client certificate of the namespace)."""
        try:
            self.api.get(SERVICE_ACCOUNTS, name, namespace=namespace)
        except NotFound:
            return False
        except KubeError as e:
            log.warning("service account not checked", extra={"namespace": namespace, "object": name,
                                                               "error": str(e)})
        return True

    def converge_pod_certificates(self, native: signer.NativeView, cas: CaSet, observed: Observed, report: PassReport,
                         now: datetime) -> None:
        """The pod-certificate signer: publish the CA set as the ClusterTrustBundle, then answer the pending
        pod certificate requests (they wait, pending, while no CA may sign)."""
        try:
            report.writes["update" if native.bundle else "create"] += signer.publish(
                self.api, native, cas, now=now, guard=self._guard)
        except ValueError as e:  # a bundle of our name that is not ours
            report.conflicts.append(str(e))
        self._answer_requests(native, cas, observed, report, now)

    def _answer_requests(self, native: signer.NativeView, cas: CaSet, observed: Observed, report: PassReport,
                         now: datetime) -> None:
        signing = cas.signer()
        if signing is None:
            return
        pods = {(p["metadata"].get("namespace") or "", p["metadata"]["name"]): p for p in observed.pods}
        outcome = signer.sign(self.api, native, signer=signing, pods=pods, enabled=observed.enabled, now=now,
                              guard=self._guard, cluster_domain=self.settings.cluster_domain)
        report.writes["update"] += outcome.writes
        report.reasons["pod-certificate:issued"] += outcome.issued
        report.reasons["pod-certificate:denied"] += outcome.denied
        for verdict, count in outcome.verdicts.items():
            self.metrics.pod_certificates.labels(verdict).inc(count)
        report.failed += outcome.failed

    def _signer_pass(self, report: PassReport, now: datetime) -> None:
        native = signer.observe(self.api, self.native)
        if native is None or not any(podcerts.is_ours(r) for r in native.requests):
            return
        # A member's intermediate as the last full pass found it (the key is never in the CA Secret).
        cas = load_ca_set(self._read_optional(SECRETS, self.settings.ca.secret_name),
                          user_ca=self._user_ca(now, "serving") or self._member_ca("serving"))
        if self.cache is not None:
            observed = self.cache.observed()
        else:
            observed = Observed()
            selector = f"{names.INJECT_LABEL}={names.NAMESPACE_OPT_IN}"
            observed.enabled = enabled_namespaces(self.api.list_objects(NAMESPACES, label_selector=selector).items)
            observed.pods = read_candidate_pods(self.api, observed.enabled)
        self._answer_requests(native, cas, observed, report, now)
