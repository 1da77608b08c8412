"""A reconcile pass: one reading of the cluster, then the three passes of docs/reconcile.md, in order:
workload certificates and bundles (`converge_workloads`), the pod-certificate signer
(`converge_pod_certificates`) and the webhook's certificate and caBundle (`converge_webhook`).

Reads first and writes only what the plan says; a 409 re-reads that one object and decides again. An
object that fails is reported and the pass goes on; an unreachable API (or a lost lease) stops the pass,
because nothing that follows could be trusted or written.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NoReturn

from app import names
from app.kube import (
    CONFIG_MAPS,
    NAMESPACES,
    SECRETS,
    SERVICE_ACCOUNTS,
    Conflict,
    KubeApi,
    KubeError,
    NotFound,
    Resource,
    Unavailable,
)
from app.names import BUNDLE_KEY, CLIENT_BUNDLE_KEY
from app.pki import (
    CaRole,
    CaSet,
    CertKey,
    TrustFacts,
    bundle_certificates,
    load_certificates,
    load_user_ca,
    service_name_constraints,
)
from app.reconcile import events, hub, podcerts, signer
from app.reconcile import status as st
from app.reconcile.ca import (
    CaPolicy,
    CaStep,
    CaUnusable,
    decide_ca,
    load_ca_set,
    other_role,
    shared_key_problem,
)
from app.reconcile.discover import (
    LISTED_KINDS,
    Target,
    WorkloadRef,
    discover,
    enabled_namespaces,
    missing_injection,
    secret_users,
    trust_only_split,
    truststore_namespaces,
)
from app.reconcile.federation import (
    INTERMEDIATE_RECORDS,
    INTERMEDIATE_SECRETS,
    Hold,
    Intermediate,
    MemberAck,
    acknowledgement,
    gate_roots,
    load_intermediate,
    members_from,
    names_another,
    roots_of,
    rotation_excluded,
    same_cluster,
    status_body,
)
from app.reconcile.hub import converge_member
from app.reconcile.metrics import ReconcileMetrics
from app.reconcile.ownership import is_owned
from app.reconcile.plan import (
    CLIENT_PREFIX,
    Item,
    Obj,
    Observed,
    Refused,
    Signing,
    Waiting,
    Write,
    bundle_namespaces,
    client_secrets,
    leaf_expiry,
    plan,
    secret_data,
)
from app.reconcile.read import read_candidate_pods, read_cluster
from app.reconcile.served import fetch_served
from app.reconcile.webhook_plan import (
    WEBHOOK_KINDS,
    WebhookSettings,
    bundles_in_use,
    configurations_trusting,
    leaves_in_use,
    webhook_items,
)

log = logging.getLogger("tls_injector.reconcile")
# Three tries per object: a 409 means someone wrote in between; three in a row means a hot object,
# better left to the next pass than fought over.
MAX_ATTEMPTS = 3
# Consecutive objects answered 5xx/unreachable before the pass gives up and waits for the retry.
UNAVAILABLE_STREAK = 3
# An object whose write failed is tried again after 30 s, then 60, 120, ... up to the resync period: a
# write the API server refuses (too large, invalid, denied by a policy) is refused the same way next time.
BACKOFF_FIRST = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=10)


# How the log, the Events and `reconcile --once` name the user's own CA Secret of each role.
_USER_CA: dict[CaRole, str] = {"serving": "user-provided CA Secret", "client": "user-provided client CA Secret"}


class NotLeader(Exception):
    """The lease was lost mid-pass: stop writing at once."""


@dataclass(frozen=True)
class ReconcileSettings:
    namespace: str
    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN
    ca: CaPolicy = field(default_factory=CaPolicy)
    user_ca_secret: str | None = None  # a kubernetes.io/tls Secret in `namespace` holding the user's CA
    # The same for the user's client CA (docs/mtls.md): never the serving CA's Secret, nor its key.
    user_client_ca_secret: str | None = None
    webhook: WebhookSettings | None = None  # keep the webhook's own certificate and caBundle current
    # Act as the pod-certificate signer and publish the ClusterTrustBundle: "auto" when the cluster serves
    # the APIs (found by discovery), "off" never, "on" says so loudly in the log when it cannot.
    pod_certificates: signer.PodCertificates = "auto"
    # One expiry series per workload Secret, labelled with its namespace and name (off: those names are
    # the cluster's inventory, served to whoever can scrape /metrics; the earliest expiry is always there).
    per_object_metrics: bool = False
    # The SPIFFE trust domain of client certificates' URI SANs (docs/mtls.md); "" means the cluster domain.
    trust_domain: str = ""
    # A hub (docs/multicluster.md): its CA sets are roots (path length 1), and every pass keeps each
    # registered member's intermediates current.
    hub: bool = False

    @property
    def user_ca_secrets(self) -> tuple[tuple[CaRole, str], ...]:
        """The user's own CA Secrets given, by role: (role, Secret name)."""
        given: tuple[tuple[CaRole, str | None], ...] = (("serving", self.user_ca_secret),
                                                         ("client", self.user_client_ca_secret))
        return tuple((role, name) for role, name in given if name)


@dataclass
class PassReport:
    writes: Counter[str] = field(default_factory=Counter)  # by action: create, update, delete
    reasons: Counter[str] = field(default_factory=Counter)
    # Refusals, one message each, by kind: an object of ours to write that someone else's object of the same
    # name is in the way of (a Secret, the ClusterTrustBundle; tls_injector_ownership_conflicts counts these
    # alone); a certificate Secret whose workloads ask for service names no certificate may carry (the
    # certificate is issued without them; tls_injector_service_names_refused); a client certificate refused
    # (workloads sharing its Secret with different service accounts, a service account that does not exist,
    # a name two client certificates would share); an object the pass left out as larger than its kind may
    # take (read.py: a workload gets no certificate, a Service names none).
    conflicts: list[str] = field(default_factory=list)
    names_refused: list[str] = field(default_factory=list)
    clients_refused: list[str] = field(default_factory=list)
    oversized: list[str] = field(default_factory=list)
    # Certificates issued naming no Service (discover.Target.namelessness): converged, as nothing the
    # reconciler could do would name them, but said, as no client can verify them.
    nameless: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # "<namespace>/<secret>" -> why its certificate waits for a CA that may sign (see plan.Waiting)
    waiting: dict[str, str] = field(default_factory=dict)
    # namespace -> why its trust bundle cannot be written (left out of the CA's rotation facts)
    excluded: dict[str, str] = field(default_factory=dict)
    # A hub: member name -> why it is not ready (absent when it is); a member: "intermediate-<role>" -> why
    # the hub's intermediate cannot be used (docs/multicluster.md)
    federation: dict[str, str] = field(default_factory=dict)
    aborted: str = ""
    unavailable_streak: int = 0
    next_ca_step: datetime | None = None  # when a CA set can next move on time alone (ca.next_step_at)

    @property
    def refused(self) -> list[str]:
        """Every refusal of the pass, of any kind (the log, and `converged`)."""
        return [*self.conflicts, *self.names_refused, *self.clients_refused, *self.oversized]

    @property
    def write_count(self) -> int:
        return sum(self.writes.values())

    @property
    def converged(self) -> bool:
        return not (self.refused or self.failed or self.waiting or self.aborted or self.excluded or self.federation)


@dataclass(frozen=True)
class WorkloadsPassed:
    """What the workloads' pass leaves for the rest: the CA set as stepped, the Secrets and their expiries."""

    cas: CaSet
    targets: list[Target]
    expiries: dict[tuple[str, str], datetime]


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
    def __init__(self, api: KubeApi, settings: ReconcileSettings, *, metrics: ReconcileMetrics | None = None,
                 may_write: Callable[[], bool] = lambda: True,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.api = api
        self.settings = settings
        self.metrics = metrics or ReconcileMetrics()
        self.may_write = may_write
        self.clock = clock
        # Conditions (reason, object) an Event already announced and that lasted into the last pass: each is
        # announced once while it lasts, not once per pass (a broken workload must not grow the Event list).
        self._told: set[tuple[str, str]] = set()
        self._lasting: set[tuple[str, str]] = set()  # the conditions of the pass under way
        # The same conditions by the workloads they are told on, (reason, message): the status's conditions.
        self._facts: dict[WorkloadRef, list[tuple[str, str]]] = {}
        # Objects whose write failed: (failures in a row, not tried again before). A write the API server
        # keeps refusing is retried after 30 s, doubling up to the resync period, not at every pass.
        self._backoff: dict[tuple[str, str, str], tuple[int, datetime]] = {}
        self._failing: set[tuple[str, str, str]] = set()  # failed in the pass under way
        self.native = signer.NativeApis(api, mode=settings.pod_certificates)
        # What the last full pass saw, for the status API (app.reconcile.status); swapped in whole.
        self.status: st.Status | None = None
        self._steps: dict[str, CaStep] = {}  # by CA Secret, as the pass stepped them
        # A member: the hub's intermediates found in this pass, by role (docs/multicluster.md).
        self._intermediates: dict[CaRole, Intermediate] = {}
        self._user: dict[CaRole, CertKey] = {}  # the user's own CAs by role, as read at the start of this pass
        self._members: dict[str, str] = {}  # a hub: member -> why it is not ready ("" when it is), last pass
        # A hub: each member's report on the roots, read before the CA sets are stepped (None: unreadable),
        # and per role the new roots held for members; a member: per role, what its report is made of.
        self._acks: dict[str, MemberAck | None] = {}
        self._ack_problems: dict[str, str] = {}  # a hub: member -> why its report cannot be used, this pass
        self._cluster_uid = ""  # a member: its kube-system Namespace uid, once read (CLUSTER_ID_ANNOTATION)
        # A hub: when it last wrote each member's intermediate of each role (re-issue of a deleted one is
        # rate-limited: hub.REISSUE_INTERVAL).
        self._issued: dict[tuple[str, CaRole], datetime] = {}
        self._held: dict[str, dict[str, Hold]] = {}
        self._excluded: frozenset[str] = frozenset()  # a hub: members no root rotation waits for
        # A member: per role, the namespaces whose bundles its report speaks of (set when the role's CA set
        # was stepped this pass); the report is made from what the pass leaves there.
        self._ack_scope: dict[CaRole, set[str]] = {}
        self._seen: tuple[list[st.WorkloadStatus], list[st.PodStatus]] | None = None

    @property
    def workload_ca_policy(self) -> CaPolicy:
        """The workload CA's policy, its name constraints those of the cluster domain unless set; a hub's
        CA is a root that signs its members' intermediates (path length 1)."""
        policy = self.settings.ca
        if self.settings.hub:
            policy = dataclasses.replace(policy, path_length=max(policy.path_length, 1))
        if policy.permitted_dns:
            return policy
        return dataclasses.replace(policy, permitted_dns=service_name_constraints(self.settings.cluster_domain))

    def run_pass(self) -> PassReport:
        """Workloads, their CA and bundles, then the webhook's own certificate when configured."""
        self._steps, self._members, now = {}, {}, self.clock()
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

    def forget(self) -> None:
        """Drop what the last pass saw (status and gauges): this replica no longer leads."""
        self.status = None
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

    def _guarded(self, work: Callable[[PassReport, datetime], object]) -> PassReport:
        report, started, now = PassReport(), time.monotonic(), self.clock()
        self._lasting, self._facts = set(), {}
        try:
            with collector_paused():
                work(report, now)
        except (KubeError, CaUnusable, NotLeader, ValueError) as e:
            report.aborted = f"{type(e).__name__}: {e}"
            self.metrics.failures.labels("pass-aborted").inc()
            log.error("reconcile pass stopped", extra={"error": report.aborted})
        self.metrics.duration.observe(time.monotonic() - started)
        self.metrics.conflicts.set(len(report.conflicts))
        self.metrics.waiting.set(len(report.waiting))
        # A condition that ended and starts again is announced again; an aborted pass saw only part of them.
        self._told = self._lasting if not report.aborted else self._told | self._lasting
        log.info("reconcile pass done", extra={"writes": dict(report.writes), "conflicts": len(report.conflicts),
                                               "names_refused": len(report.names_refused),
                                               "clients_refused": len(report.clients_refused),
                                               "oversized": len(report.oversized), "nameless": len(report.nameless),
                                               "failed": len(report.failed), "waiting": len(report.waiting),
                                               "converged": report.converged})
        return report

    def _pass(self, report: PassReport, now: datetime) -> None:
        """A full pass: the three passes of docs/reconcile.md, on one reading of the cluster."""
        # Requests before pods: a request's pod was created before it, so it is in the pod list read next.
        native = signer.observe(self.api, self.native)
        observed = read_cluster(self.api)
        workloads = self.converge_workloads(observed, native, report, now)
        if self.settings.hub:
            self.converge_members(report)
        if native is not None:
            self.converge_pod_certificates(native, workloads.cas, observed, report, now)
        missing = missing_injection(observed.pods, enabled=observed.enabled, own_namespace=self.settings.namespace)
        self.metrics.missing_injection.set(len(missing))
        self._seen = (st.workload_statuses(workloads.targets, workloads.expiries, report.waiting, self._facts),
                      st.pod_statuses(missing))
        if self.settings.webhook is not None:
            configs = self.converge_webhook(self.settings.webhook, report, now)
            self.metrics.serving_verdict = self._served_verdict(self.settings.webhook, configs, now)

    # The first pass: workload certificates and bundles (docs/reconcile.md, "A pass").

    def converge_workloads(self, observed: Observed, native: signer.NativeView | None, report: PassReport,
                           now: datetime) -> WorkloadsPassed:
        """Workload certificates and bundles: discover the Secrets the cluster needs, step the workload CA
        on the bundles and leaves in use, then plan and write every leaf Secret and trust bundle. Returns
        the CA set as stepped (the pod-certificate signer signs with it), the Secrets and their expiries."""
        workloads, pods = observed.workloads, observed.pods
        if native is not None:  # pod certificates served: who asked for them gets no Secret
            workloads, pods = secret_users(workloads, pods)
        observed.truststores = truststore_namespaces(workloads, pods, enabled=observed.enabled)
        # Who asked for trust alone gets no Secret; their namespaces get the bundle (names.MODE_TRUST_ONLY).
        workloads, pods, observed.trust_only = trust_only_split(workloads, pods, enabled=observed.enabled)
        targets = discover(workloads, pods, enabled=observed.enabled, cluster_domain=self.settings.cluster_domain,
                           services=observed.services, own_namespace=self.settings.namespace,
                           trust_domain=self.settings.trust_domain)
        targets = self._accounts_checked(targets)
        self._report_refused_names(targets, report, now)
        self._report_oversized(observed, report, now)
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
        for item in plan(targets, observed, signing):
            stored[item.key] = self._converge(item, observed.lookup(item), report, now)
        if self._intermediates:
            self._report_roots(_after(observed, stored), targets, native, report, now)
        expiries = self._cert_metrics(targets, stored, signing)
        self.metrics.not_issued.set(sum((t.namespace, t.secret_name) not in expiries for t in targets))
        return WorkloadsPassed(step.cas, targets, expiries)

    def _report_refused_names(self, targets: list[Target], report: PassReport, now: datetime) -> None:
        """Names a workload asked for that no certificate may carry: the rest are issued; these are said
        in the log and the report at every pass, and in an Event on the workload once while it lasts."""
        refused = [t for t in targets if t.refused]
        self.metrics.names_refused.set(len(refused))
        for target in refused:
            message = target.refusal()
            report.names_refused.append(message)
            log.warning("service names refused", extra={"namespace": target.namespace, "object": target.secret_name,
                                                        "reason": message})
            self._announce(target.workloads, f"{target.namespace}/{target.secret_name}", reason="ServiceNamesRefused",
                           message=message, now=now)
        nameless = [t for t in targets if not t.dns_names]
        self.metrics.nameless.set(len(nameless))
        for target in nameless:
            message = target.namelessness()
            report.nameless.append(message)
            log.warning("certificate names no Service", extra={"namespace": target.namespace,
                                                               "object": target.secret_name, "reason": message})
            self._announce(target.workloads, f"{target.namespace}/{target.secret_name}", reason="NoServiceName",
                           message=message, now=now)

    def _accounts_checked(self, targets: list[Target]) -> list[Target]:
        """A client certificate names its workload's service account (its SPIFFE ID): one that does not
        exist is no identity to vouch for, and whoever creates it later gets a certificate already made
        for that name. So that client certificate is refused (reported with the other client refusals,
        the rest go on), and one issued before is removed. One `get` per account asked for, per pass."""
        exists: dict[tuple[str, str], bool] = {}
        checked = []
        for target in targets:
            key = (target.namespace, target.client_ids[0].rsplit("/sa/", 1)[-1]) if target.client_wanted else None
            if key is not None and key not in exists:
                exists[key] = self._account_exists(*key)
            checked.append(target if key is None or exists[key] else target.client_refused(
                f"its service account {key[1]} does not exist in namespace {key[0]}; create it, or run the "
                "workload as one that exists"))
        return checked

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

    def _report_oversized(self, observed: Observed, report: PassReport, now: datetime) -> None:
        """Objects the pass left out as larger than their kind holds (read.py): said in the log and the
        report at every pass, and in an Event on the object once while it lasts; the rest goes on."""
        for kind, big, cap in observed.oversized:
            what = "its selector names no certificate" if kind == "Service" else "it gets no certificate"
            message = (f"{kind} {big.namespace}/{big.name}: {big.size} bytes of what tls-injector reads, over the "
                       f"{cap} a {kind} may take: left out ({what}); {_OVERSIZED_HINT}")
            report.oversized.append(message)
            log.warning("object too large; left out", extra={"namespace": big.namespace, "object": big.name,
                                                              "kind": kind, "reason": message})
            ref = WorkloadRef(kind, big.namespace, big.name, "", "v1" if kind == "Service" else LISTED_KINDS[kind])
            self._announce((ref,), f"{kind}/{big.namespace}/{big.name}", reason="ObjectTooLarge", message=message,
                           now=now)

    def _ensure_ca(self, observed: Observed, targets: list[Target], now: datetime, report: PassReport, *,
                   native: signer.NativeView | None = None) -> CaStep:
        """The workloads' CA set, stepped on what this pass observed of bundles and leaves in use."""
        namespaces = bundle_namespaces(targets, observed.bundle_wanted)
        excluded = self._unwritable_bundles(namespaces, observed, targets, report, now)
        namespaces -= set(excluded)
        bundles, leaves = self._serving_facts(observed, targets, namespaces, native, now)
        if "serving" in self._intermediates:
            self._ack_scope["serving"] = namespaces
        return self._step_ca(self.workload_ca_policy, bundles=bundles, leaves=leaves,
                             user_ca=self._user.get("serving") or self._member_ca("serving"), now=now,
                             report=report, external=self._gate("serving", now))

    def _serving_facts(self, observed: Observed, targets: list[Target], namespaces: set[str],
                       native: signer.NativeView | None, now: datetime) -> tuple[list[list[Any]], list[list[Any]]]:
        """The serving bundles and leaves in use: what the workload CA is stepped on, and a member's report."""
        # Client Secrets too: their ca.crt is a bundle of the serving CAs in use (their tls.crt chains to no
        # serving CA, so it changes no fact about one).
        wanted = {(t.namespace, t.secret_name) for t in targets} | client_secrets(targets)
        in_use = [obj for key, obj in observed.leaves.items() if key in wanted]
        leaves = [load_certificates(secret_data(obj, keys=("tls.crt",)).get("tls.crt", b"")) for obj in in_use]
        # A leaf Secret whose last write failed keeps serving (its leaf counts), but its ca.crt cannot be
        # brought up to date, so it is no bundle the new CA must wait for.
        in_use = [obj for obj in in_use if (SECRETS.kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
                  not in self._backoff]
        # The facts depend on which distinct bundles are in use, not on how many hold each: the bundles of
        # all namespaces, and every leaf Secret's ca.crt, are nearly always one and the same text.
        # (A leaf Secret's ca.crt is a bundle too: a client may trust its peers through its own mount.)
        bundles = [bundle_certificates({BUNDLE_KEY: pem}) for pem in
                   {((observed.bundles.get(ns) or {}).get("data") or {}).get(BUNDLE_KEY, "") for ns in namespaces}]
        bundles += [load_certificates(pem) for pem in
                    {secret_data(obj, keys=("ca.crt",)).get("ca.crt", b"") for obj in in_use}]
        if native is not None:  # the ClusterTrustBundle is a bundle in use; issued pod certificates are leaves
            bundles.append(load_certificates(str(((native.bundle or {}).get("spec") or {}).get("trustBundle") or "")
                                        .encode()))
            leaves += [load_certificates(chain) for chain in podcerts.issued_chains(native.requests, now=now)]
        return bundles, leaves

    def _ensure_client_ca(self, observed: Observed, targets: list[Target], now: datetime,
                          report: PassReport) -> CaStep:
        """The client CA set, stepped by the same trust state machine as the workload CA, on its own facts:
        the bundles in use are the `client-ca-bundle.crt` of every namespace's trust bundle (those left out
        of the serving CA's facts are left out here too), the leaves the client Secrets' certificates.
        Refused client Secrets (users of one Secret with different service accounts) are reported here."""
        for target in targets:
            if message := target.client_refusal():
                report.clients_refused.append(message)
                log.warning("client certificate refused", extra={"namespace": target.namespace,
                                                                 "object": target.client_secret, "reason": message})
                self._announce(target.workloads, f"{target.namespace}/{target.client_secret}",
                               reason="ClientCertificateRefused", message=message, now=now)
        namespaces = bundle_namespaces(targets, observed.bundle_wanted) - set(report.excluded)
        bundles, leaves = self._client_facts(observed, targets, namespaces)
        base = self.settings.ca
        policy = CaPolicy(secret_name=names.CLIENT_CA_SECRET, common_name="tls-injector client CA",
                          validity=base.validity, lookahead=base.lookahead, settle=base.settle,
                          path_length=1 if self.settings.hub else 0)
        if "client" in self._intermediates:
            self._ack_scope["client"] = namespaces
        return self._step_ca(policy, bundles=bundles, leaves=leaves,
                             user_ca=self._user.get("client") or self._member_ca("client"), now=now, report=report,
                             external=self._gate("client", now))

    @staticmethod
    def _client_facts(observed: Observed, targets: list[Target],
                      namespaces: set[str]) -> tuple[list[list[Any]], list[list[Any]]]:
        """The client bundles and leaves in use: what the client CA is stepped on, and a member's report."""
        pems = {((observed.bundles.get(ns) or {}).get("data") or {}).get(CLIENT_BUNDLE_KEY, "") for ns in namespaces}
        bundles = [bundle_certificates({CLIENT_BUNDLE_KEY: pem}, prefix=CLIENT_PREFIX) for pem in pems]
        wanted = client_secrets(targets)
        leaves = [load_certificates(secret_data(obj, keys=("tls.crt",)).get("tls.crt", b""))
                  for key, obj in observed.leaves.items() if key in wanted]
        return bundles, leaves

    def _gate(self, role: CaRole, now: datetime) -> Callable[[CaSet, TrustFacts], TrustFacts] | None:
        """A hub: its CA set's facts with its members' reports (federation.gate_roots); None elsewhere."""
        if not self.settings.hub:
            return None
        settle = self.settings.ca.settle

        def gate(cas: CaSet, facts: TrustFacts) -> TrustFacts:
            gated, self._held[role] = gate_roots(cas, facts, self._acks, now=now, settle=settle,
                                                 excluded=self._excluded)
            return gated

        return gate

    def _read_acks(self) -> tuple[dict[str, MemberAck | None], dict[str, str]]:
        """Each member's report (None: unusable, which holds every rotation), and why one is unusable."""
        registered = self.api.list_objects(SECRETS, namespace=self.settings.namespace,
                                           label_selector=names.MEMBER_LABEL)
        members, _ = members_from(registered.items)
        self._excluded = rotation_excluded(members)
        for name in sorted(self._excluded):
            log.warning("member excluded from root rotations: its pods may meet peers they do not trust",
                        extra={"member": name, "annotation": names.ROTATION_EXCLUDED_ANNOTATION})
        read = hub.each_member(members, lambda m: hub.member_ack(m, namespace=self.settings.namespace))
        acks = {m.name: ack for m, (ack, _) in zip(members, read, strict=True)}
        return acks, {m.name: why for m, (_, why) in zip(members, read, strict=True) if why}

    def _report_roots(self, after: Observed, targets: list[Target], native: signer.NativeView | None,
                      report: PassReport, now: datetime) -> None:
        """A member: write its report on the hub's roots, from the bundles and leaves as this pass leaves
        them (`after`: what it read, with what it wrote), so the next pass, which reads them, reports the
        same and writes nothing; the write is counted with the pass's others. A client role with no client
        bundle in use yet has none that lacks its roots. Best effort: a report that cannot be written only
        holds the hub's next root rotation, which is the safe direction."""
        existing = self._read_optional(CONFIG_MAPS, names.FEDERATION_STATUS_CONFIGMAP)
        previous = ((existing or {}).get("metadata") or {}).get("annotations") or {}
        annotations: dict[str, str] = {}
        in_use: set[str] = set()
        for role, found in self._intermediates.items():
            scope = self._ack_scope.get(role)
            bundles, leaves = ([], []) if scope is None else (
                self._serving_facts(after, targets, scope, native, now) if role == "serving"
                else self._client_facts(after, targets, scope))
            part = acknowledgement(found.roots, bundles=bundles, leaves=leaves, previous=previous, now=now)
            in_use.update(v for v in part.pop(names.ROOTS_IN_USE_ANNOTATION).split(",") if v)
            annotations.update(part)
        annotations[names.ROOTS_IN_USE_ANNOTATION] = ",".join(sorted(in_use))
        if cluster_id := self._cluster_id():
            annotations[names.CLUSTER_ID_ANNOTATION] = cluster_id
        body = status_body(existing, self.settings.namespace, annotations)
        if body is None:
            return
        try:
            if existing is None:
                self.api.create(CONFIG_MAPS, body, namespace=self.settings.namespace)
            else:
                self.api.replace(CONFIG_MAPS, body)
            report.writes["create" if existing is None else "update"] += 1
            report.reasons["federation-status"] += 1
            log.info("report on the hub's roots written", extra={"annotations": annotations})
        except KubeError as e:
            log.warning("the report on the hub's roots was not written", extra={"error": str(e)})

    def _cluster_id(self) -> str:
        """This cluster's kube-system Namespace uid (read once: it never changes), "" when it cannot be read.
        A list by name, which the reconciler's RBAC already grants (it lists Namespaces), not a get."""
        if not self._cluster_uid:
            try:
                found = self.api.list_objects(NAMESPACES, field_selector="metadata.name=kube-system").items
            except KubeError as e:
                log.warning("kube-system Namespace not read: the report says no cluster id", extra={"error": str(e)})
                return ""
            self._cluster_uid = str(((found[0] if found else {}).get("metadata") or {}).get("uid") or "")
        return self._cluster_uid

    # Multi-cluster (docs/multicluster.md): a member signs with the hub's intermediates; a hub issues them.

    def _read_intermediates(self, report: PassReport, now: datetime) -> dict[CaRole, Intermediate]:
        """The hub's intermediates in this member's namespace, by role; none: standalone, as before. One
        that cannot be used is reported (log, report, metric) and left out: the CA set then goes on with
        what it holds, as it would without a hub. The user's own CA of a role (--ca-secret,
        --client-ca-secret) takes precedence over the hub's intermediate of that role, which is then
        not used (said in the log at every pass: that role's trust does not reach the other clusters)."""
        found: dict[CaRole, Intermediate] = {}
        if self.settings.hub:
            return found
        for role, name in INTERMEDIATE_SECRETS.items():
            obj = self._read_optional(SECRETS, name)
            if obj is None:
                if role in self._intermediates:  # held at the last pass: deleted here since
                    self._drop_record(role, report)
                continue
            if role in self._user:
                log.warning("the hub's intermediate is not used: your own CA of that role takes precedence",
                            extra={"role": role, "secret": name, "user_secret": self._user_secret(role)})
                continue
            record = self._read_optional(CONFIG_MAPS, INTERMEDIATE_RECORDS[role])
            if names_another(record, obj):
                self._drop_record(role, report)
                record = None
            try:
                found[role] = load_intermediate(obj, now=now, trust_domain=self.settings.trust_domain or
                                                self.settings.cluster_domain, record=record)
            except ValueError as e:
                report.federation[f"intermediate-{role}"] = str(e)
                log.error("the hub's intermediate cannot be used", extra={"role": role, "reason": str(e)})
        for role in ("serving", "client"):
            self.metrics.member_intermediate.labels(role).set(int(role in found))
        return found

    def _drop_record(self, role: CaRole, report: PassReport) -> None:
        """The hub's intermediate Secret of `role`, used at the last pass, is gone (or the hub's record names
        another than it holds): delete the hub's record (at the version read), since the hub, which may not
        read a member's Secrets, decides from the record alone, and a record naming what is not here would
        leave this cluster without its intermediate until the hub's next renewal. The hub then issues a new
        one (at most once an hour)."""
        record = self._read_optional(CONFIG_MAPS, INTERMEDIATE_RECORDS[role])
        if record is None or not is_owned(record, "intermediate-record"):
            return
        try:
            self.api.delete(CONFIG_MAPS, INTERMEDIATE_RECORDS[role], namespace=self.settings.namespace,
                            resource_version=str(record["metadata"].get("resourceVersion") or ""))
        except KubeError as e:
            log.warning("the hub's record of a deleted intermediate was not deleted", extra={"role": role,
                                                                                            "error": str(e)})
            return
        report.writes["delete"] += 1
        report.reasons["intermediate-record-dropped"] += 1
        log.warning("the hub's intermediate was deleted here: its record deleted, so the hub issues a new one",
                    extra={"role": role, "secret": INTERMEDIATE_SECRETS[role]})

    def _member_ca(self, role: CaRole) -> CertKey | None:
        found = self._intermediates.get(role)
        return found.ca if found is not None else None

    def _roots(self, role: CaRole) -> tuple[Any, ...]:
        found = self._intermediates.get(role)
        return found.roots if found is not None else ()

    def converge_members(self, report: PassReport) -> None:
        """A hub: every registered member's intermediates, from the roots as this pass stepped them."""
        settings = self.settings
        now = self.clock()
        roots = (roots_of("serving", self._steps.get(self.workload_ca_policy.secret_name), now=now),
                 roots_of("client", self._steps.get(names.CLIENT_CA_SECRET), now=now))
        registered = self.api.list_objects(SECRETS, namespace=settings.namespace, label_selector=names.MEMBER_LABEL)
        members, problems = members_from(registered.items)
        problems |= same_cluster(members, self._acks)
        visited = [m for m in members if m.name not in problems]
        outcomes = hub.each_member(visited, lambda m: converge_member(
            m, namespace=settings.namespace, roots=roots, clock=self.clock, guard=self._guard, issued=self._issued))
        self.metrics.member_ready.clear()
        secrets = {m.name: m.secret for m in members}
        for key, problem in problems.items():
            outcomes.append(hub.MemberOutcome(key, problem))
        holds = {(role, root): hold for role, roots in self._held.items() for root, hold in roots.items()}
        for (role, root), hold in holds.items():
            log.warning("root rotation held for members", extra={"role": role, "root": root,
                                                                 "members": list(hold.members), "new": hold.new})
        held = {key: hold.members for key, hold in holds.items() if hold.new}
        for outcome in outcomes:
            # Why its report cannot be used: said when the visit did not say it already (unreachable).
            unreadable = self._ack_problems.get(outcome.name, "")
            if unreadable and (outcome.ready or "report unreadable" in unreadable):
                outcome.problem = "; ".join(p for p in (outcome.problem, unreadable) if p)
            down = [f"the new {role} root {root} waits for it (its report cannot be read)"
                    for (role, root), waiting in held.items() if outcome.name in waiting and self._acks.get(
                        outcome.name) is None and not outcome.ready]
            overdue = [hold.overdue_reason(role, root, now) for (role, root), hold in holds.items()
                       if outcome.name in hold.members and hold.overdue(now)]
            if said := [p for p in (outcome.problem, *down, *overdue) if p]:
                outcome.problem = "; ".join(said)
            self._members[outcome.name] = outcome.problem
            self.metrics.member_ready.labels(outcome.name).set(int(outcome.ready))
            report.writes.update(outcome.writes)
            report.reasons.update(f"member:{reason}" for reason in outcome.reasons)
            if outcome.ready:
                continue
            report.federation[outcome.name] = outcome.problem
            log.error("member not ready", extra={"member": outcome.name, "reason": outcome.problem})
            secret = secrets.get(outcome.name)
            if secret is not None:
                meta = secret["metadata"]
                ref = WorkloadRef("Secret", settings.namespace, meta["name"], meta.get("uid", ""), "v1")
                self._announce((ref,), f"member/{outcome.name}", reason="MemberNotReady", message=outcome.problem,
                               now=now)

    def _unwritable_bundles(self, namespaces: set[str], observed: Observed, targets: list[Target],
                            report: PassReport, now: datetime) -> dict[str, str]:
        """Namespaces whose bundle this reconciler cannot write, by why: a ConfigMap of the bundle's name
        that is not ours, or one whose last write the API server refused. They are left out of the CA's
        rotation facts, so the new CA does not wait for them forever (and every leaf with it); their own
        pods are told why, as is the log, the metric, the report and `doctor`."""
        excluded = {ns: f"ConfigMap {ns}/{names.TRUST_BUNDLE_CONFIGMAP} exists and is not managed by tls-injector"
                    for ns in sorted(namespaces & observed.squatted)}
        excluded |= {ns: f"ConfigMap {ns}/{names.TRUST_BUNDLE_CONFIGMAP} could not be written"
                     for ns in sorted(namespaces - observed.squatted)
                     if (CONFIG_MAPS.kind, ns, names.TRUST_BUNDLE_CONFIGMAP) in self._backoff}
        self.metrics.bundles_excluded.set(len(excluded))
        for ns, why in excluded.items():
            message = (f"{why}: pods in {ns} do not get tls-injector's trust bundle and will not trust the "
                       f"next CA; CA rotation goes on without this namespace. Delete or rename that ConfigMap.")
            report.excluded[ns] = message
            log.error("trust bundle cannot be written; namespace left out of CA rotation",
                      extra={"namespace": ns, "reason": why})
            users = tuple(ref for t in targets if t.namespace == ns for ref in t.workloads)
            self._announce(users, f"bundle/{ns}", reason="TrustBundleExcluded", message=message, now=now)
        return excluded

    def _ca_metrics(self, cas: CaSet, *, client: bool = False) -> None:
        """Each CA of the set by its trust state: the workload CA's gauge, or the client CA set's."""
        gauge = self.metrics.client_ca_expiry if client else self.metrics.ca_expiry
        gauge.clear()
        for record in cas.records:
            gauge.labels(record.fingerprint[:16], str(record.state)).set(record.cert.not_valid_after_utc.timestamp())

    def _cert_metrics(self, targets: list[Target], stored: dict[tuple[str, str, str], Obj | None],
                      signing: Signing) -> dict[tuple[str, str], datetime]:
        """Each stored leaf's expiry, into the metric; returned for the status snapshot."""
        expiries = {}
        for target in targets:
            obj = stored.get((SECRETS.kind, target.namespace, target.secret_name))
            # Someone else's Secret in the way is no certificate of ours, whatever it holds.
            if is_owned(obj, "leaf") and (expiry := leaf_expiry(target, obj, signing)) is not None:
                expiries[target.namespace, target.secret_name] = expiry
        self.metrics.cert_expiry.replace({key: expiry.timestamp() for key, expiry in expiries.items()},
                                         per_object=self.settings.per_object_metrics)
        clients = {}
        for key in client_secrets(targets):
            chain = load_certificates(secret_data(stored.get((SECRETS.kind, *key)), keys=("tls.crt",))
                                      .get("tls.crt", b""))
            if chain:
                clients[key] = chain[0].not_valid_after_utc.timestamp()
        self.metrics.client_cert_expiry.replace(clients, per_object=self.settings.per_object_metrics)
        return expiries

    # The second: the pod-certificate signer (docs/reconcile.md, "Pod certificates").

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
        observed = Observed()
        selector = f"{names.INJECT_LABEL}={names.NAMESPACE_OPT_IN}"
        observed.enabled = enabled_namespaces(self.api.list_objects(NAMESPACES, label_selector=selector).items)
        observed.pods = read_candidate_pods(self.api, observed.enabled)
        self._answer_requests(native, cas, observed, report, now)

    # The third: the webhook's certificate and caBundle (docs/reconcile.md, "Webhook self-care").

    def converge_webhook(self, ws: WebhookSettings, report: PassReport,
                         now: datetime) -> dict[tuple[str, str], Obj]:
        """The webhook's serving Secret and the caBundle of both configurations (see webhook_plan);
        returns the configurations as stored at the end, keyed by (kind, name)."""
        configs: dict[tuple[str, str], Obj] = {}
        for resource in WEBHOOK_KINDS:
            for name in ws.configurations:
                found = self._read_optional(resource, name)
                if found is not None:
                    configs[resource.kind, name] = found
        if not configs:
            log.warning("no webhook configuration found; only the serving certificate is kept",
                        extra={"configurations": list(ws.configurations)})
        serving = self._read_optional(SECRETS, ws.secret_name)
        step = self._step_ca(ws.ca, bundles=bundles_in_use(configs.values()), leaves=leaves_in_use(serving),
                             user_ca=None, now=now, report=report)
        stored = dict(configs)
        for item in webhook_items(ws, self.settings.namespace, configs, Signing.of(step.cas, now=now)):
            existing = serving if item.resource is SECRETS else configs.get((item.resource.kind, item.name))
            result = self._converge(item, existing, report, now)
            if item.resource is not SECRETS and result is not None:
                stored[item.resource.kind, item.name] = result
        return stored

    def _served_verdict(self, ws: WebhookSettings, configs: dict[tuple[str, str], Obj], now: datetime) -> bool | None:
        """Does every caBundle trust the certificate the webhook serves now? One TLS handshake per pass
        (no API call: the configurations were just read); None when not checked or unreachable."""
        self.metrics.serving_trusted.clear()
        if ws.served_address is None or not configs:
            return None
        dns_name = f"{ws.service}.{self.settings.namespace}.svc"
        served = fetch_served(*ws.served_address, server_name=dns_name, explicit=True)
        chain = load_certificates(served.chain_pem)
        if not chain:
            log.warning("cannot check the served certificate", extra={"address": served.address, "error": served.error})
            return None
        trusted = configurations_trusting(configs, chain, default_dns=dns_name, now=now)
        for name, verdict in trusted.items():
            self.metrics.serving_trusted.labels(name).set(int(verdict))
        if not all(trusted.values()):
            log.error("a caBundle does not trust the certificate the webhook serves: admission calls fail",
                      extra={"address": served.address, "configurations": [n for n, v in trusted.items() if not v]})
        return all(trusted.values())

    # What the three share: stepping a CA set, and writing one object with its preconditions and retries.

    def _step_ca(self, policy: CaPolicy, *, bundles: Sequence[Sequence[Any]], leaves: Sequence[Sequence[Any]],
                 user_ca: CertKey | None, now: datetime, report: PassReport,
                 external: Callable[[CaSet, TrustFacts], TrustFacts] | None = None) -> CaStep:
        """Step a CA set and persist it before anything is signed with it; a 409 re-reads and re-decides."""
        for _ in range(MAX_ATTEMPTS):
            existing = self._read_optional(SECRETS, policy.secret_name)
            step: CaStep = decide_ca(existing, namespace=self.settings.namespace, bundles=bundles, leaves=leaves,
                                     now=now, policy=policy, user_ca=user_ca, external=external)
            if step.write is not None:
                try:
                    self._write(step.write, report)
                except Conflict:
                    continue  # another reconciler stepped first: use what it stored
                kind = "client-ca" if policy.secret_name == names.CLIENT_CA_SECRET else "ca"
                self.metrics.rotations.labels(kind, step.write.reason.partition(":")[0]).inc()
                log.info("CA set stored", extra={"secret": policy.secret_name, "reason": step.write.reason,
                                                 "states": step.cas.states()})
            self._steps[policy.secret_name] = step
            if step.next_step_at is not None:
                report.next_ca_step = min(step.next_step_at, report.next_ca_step or step.next_step_at)
            return step
        raise Conflict(f"the CA Secret {policy.secret_name} kept changing under us; next pass")

    def _user_secret(self, role: CaRole) -> str | None:
        settings = self.settings
        return (settings.user_ca_secret if role == "serving" else settings.user_client_ca_secret) or None

    def _user_cas(self, now: datetime) -> dict[CaRole, CertKey]:
        """The user's own CAs by role, each checked (`_user_ca`), and checked apart (`shared_key_problem`):
        neither may share a key with the other, nor with a CA the other role's set holds (the generated
        one, or one on its way in or out). Raises CaUnusable, before anything is stepped or written."""
        roles: tuple[CaRole, CaRole] = ("client", "serving")  # both given and alike: the client one is refused
        found = {role: ca for role in roles if (ca := self._user_ca(now, role)) is not None}
        for role, ca in found.items():
            other = other_role(role)
            secret = names.CLIENT_CA_SECRET if other == "client" else self.settings.ca.secret_name
            if problem := shared_key_problem(role, ca, other_user_ca=found.get(other),
                                             other_set=self._read_optional(SECRETS, secret)):
                self._refuse_user_ca(role, problem, now)
        return found

    def _user_ca(self, now: datetime, role: CaRole = "serving") -> CertKey | None:
        """The user's own CA of `role` from its Secret (--ca-secret, --client-ca-secret), checked: a CA
        (CA:TRUE, keyCertSign), valid now, its key matching. Read at every pass, never stored elsewhere."""
        name = self._user_secret(role)
        if not name:
            return None
        try:
            secret = self.api.get(SECRETS, name, namespace=self.settings.namespace)
        except NotFound as e:
            raise CaUnusable(f"{_USER_CA[role]} {self.settings.namespace}/{name} does not exist") from e
        data = secret_data(secret)
        try:
            return load_user_ca(data.get("tls.crt", b""), data.get("tls.key", b""), now=now)
        except ValueError as e:
            self._refuse_user_ca(role, str(e), now, secret=secret, cause=e)

    def _refuse_user_ca(self, role: CaRole, why: str, now: datetime, *, secret: Obj | None = None,
                        cause: Exception | None = None) -> NoReturn:
        """The pass stops (nothing may be signed with it, and no other CA is minted in its place); the log,
        the exit status, the failures metric and a Warning Event `CaUnusable` on the Secret say why."""
        name = self._user_secret(role) or ""
        message = f"{_USER_CA[role]} {self.settings.namespace}/{name}: {why}"
        if secret is None:
            secret = self._read_optional(SECRETS, name) or {"metadata": {}}
        ref = WorkloadRef("Secret", self.settings.namespace, name, secret["metadata"].get("uid", ""), "v1")
        self._announce((ref,), f"ca/{name}", reason="CaUnusable", message=message, now=now)
        raise CaUnusable(message) from cause

    def _converge(self, item: Item, existing: Obj | None, report: PassReport, now: datetime) -> Obj | None:
        """Decide and write one object, re-reading after a 409; returns what is stored at the end."""
        failures, retry_at = self._backoff.get(item.key, (0, now))
        if retry_at > now:
            self._failed(item, f"{failures} writes failed in a row; next try at {retry_at.isoformat()}", report, now)
            return existing
        stored = self._converge_now(item, existing, report, now)
        if item.key in self._failing:
            self._failing.discard(item.key)
            delay = min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX) if failures else timedelta(0)
            self._backoff[item.key] = (failures + 1, now + delay)
        else:
            self._backoff.pop(item.key, None)
        return stored

    def _converge_now(self, item: Item, existing: Obj | None, report: PassReport, now: datetime) -> Obj | None:
        for _ in range(MAX_ATTEMPTS):
            outcome = item.decide(existing)
            if isinstance(outcome, Waiting) and existing is None and (found := self._unlisted(item)) is not None:
                existing = found  # someone else's Secret in the way: a conflict to report, not a wait
                continue
            if isinstance(outcome, Waiting):
                self._waiting(item, outcome, report, now)
                outcome = outcome.refresh
            if outcome is None:
                return existing
            if isinstance(outcome, Refused):
                self._refused(item, outcome, report, now)
                return existing
            try:
                stored = self._write(outcome, report, item=item, now=now)
            except Conflict:
                existing = self._read_optional(item.resource, item.name, item.namespace)
                continue
            except NotFound:
                if outcome.action != "update":
                    return None  # deleted already, or the namespace itself is gone
                existing = None
                continue
            except KubeError as e:
                self._write_failed(item, outcome, e, report, now)
                return existing
            report.unavailable_streak = 0
            return stored
        self._failing.add(item.key)
        self._failed(item, "kept conflicting", report, now)
        return existing

    def _unlisted(self, item: Item) -> Obj | None:
        """A certificate Secret the pass did not list (it lists ours only, by label) may still exist,
        someone else's: a create would meet it, but a certificate waiting for a CA creates nothing, and
        would say "waits" while the way is blocked. One read for each certificate that waits with no
        Secret of ours: a handful during a CA rotation, none otherwise."""
        return self._read_optional(item.resource, item.name, item.namespace) if item.resource is SECRETS else None

    def _write_failed(self, item: Item, write: Write, error: KubeError, report: PassReport, now: datetime) -> None:
        if isinstance(error, Unavailable):
            # One 5xx may be about this object (a broken webhook on Secrets, say); several in a row
            # mean the API server is in trouble, and hammering it with the rest would not help.
            report.unavailable_streak += 1
            if report.unavailable_streak >= UNAVAILABLE_STREAK:
                raise error
        self._failing.add(item.key)
        self._failed(item, f"{write.action}: {error}", report, now)

    def _write(self, write: Write, report: PassReport, *, item: Item | None = None,
               now: datetime | None = None) -> Obj | None:
        if not self.may_write():
            raise NotLeader("lost the leader lease")
        stored: Obj | None = None
        if write.action == "create":
            stored = self.api.create(write.resource, write.body or {}, namespace=write.namespace)
        elif write.action == "update":
            stored = self.api.replace(write.resource, write.body or {})
        else:
            self.api.delete(write.resource, write.name, namespace=write.namespace,
                            resource_version=write.resource_version)
        report.writes[write.action] += 1
        report.reasons[write.reason] += 1
        log.info("object written", extra={"action": write.action, "kind": write.resource.kind,
                                          "namespace": write.namespace, "object": write.name, "reason": write.reason})
        if item is not None and now is not None:
            self._written(item, write, now)
        return stored

    def _guard(self) -> None:
        if not self.may_write():
            raise NotLeader("lost the leader lease")

    def _written(self, item: Item, write: Write, now: datetime) -> None:
        verb, _, why = write.reason.partition(":")
        if verb in ("issued", "renewed"):
            what = "client certificate" if item.client else "certificate"
            self.metrics.rotations.labels("client-leaf" if item.client else "leaf", why).inc()
            reason = f"{'Client' if item.client else ''}Certificate{verb.capitalize()}"
            events.emit(self.api, item.workloads, reason=reason, kind="Normal", now=now,
                        message=f"Secret {item.name}: {what} {verb} ({why})")

    def _refused(self, item: Item, refused: Refused, report: PassReport, now: datetime) -> None:
        report.conflicts.append(refused.message)
        log.warning("object not owned; left untouched", extra={"namespace": item.namespace, "object": item.name})
        self._announce(item.workloads, f"{item.namespace}/{item.name}", reason="SecretConflict",
                       message=refused.message, now=now)

    def _waiting(self, item: Item, waiting: Waiting, report: PassReport, now: datetime) -> None:
        """Reported every pass (log, report, gauge); the Event once per wait, not once per pass."""
        key = f"{item.namespace}/{item.name}"
        report.waiting[key] = waiting.message
        log.warning("certificate waits for a CA that may sign", extra={"namespace": item.namespace,
                                                                       "object": item.name, "reason": waiting.message})
        self._announce(item.workloads, key, reason="CertificateWaiting", message=waiting.message, now=now)

    def _announce(self, refs: tuple[WorkloadRef, ...], key: str, *, reason: str, message: str, now: datetime,
                  kind: Literal["Normal", "Warning"] = "Warning") -> None:
        """A Warning Event for a condition of `key`, once while it lasts: the log and the report say it at
        every pass; the Event list says it once (and again if it ends and comes back)."""
        condition = (reason, key)
        self._lasting.add(condition)
        for ref in refs:
            self._facts.setdefault(ref, []).append((reason, message))
        if condition not in self._told:
            self._told.add(condition)
            events.emit(self.api, refs, reason=reason, kind=kind, message=message, now=now)

    def _failed(self, item: Item, why: str, report: PassReport, now: datetime) -> None:
        report.failed.append(f"{item.resource.kind} {item.namespace}/{item.name}: {why}")
        self.metrics.failures.labels("client-secret" if item.client else item.resource.kind.lower()).inc()
        log.warning("object not converged", extra={"namespace": item.namespace, "object": item.name, "error": why})
        self._announce(item.workloads, f"{item.resource.kind}/{item.namespace}/{item.name}",
                       reason="ClientCertificateFailed" if item.client else "CertificateFailed", message=why, now=now)

    def _read_optional(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None only when the API confirmed it does not exist (any other error propagates)."""
        try:
            return self.api.get(resource, name, namespace=namespace or self.settings.namespace)
        except NotFound:
            return None


_OVERSIZED_HINT = (f"a Service is read as its name and selector, a workload as its pod template's labels, "
                   f"{names.DOMAIN} annotations and service account (docs/security.md, \"The reconciler's memory\")")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the length of a pass.

    A pass decodes the cluster's lists into about a million small dicts and strings that all live until
    it ends. The collector's full sweeps over them free nothing (decoded JSON holds no cycles, and
    reference counting frees it all when the pass is over) and cost a fifth of a converged pass at
    10,000 workloads. Whatever cycles a pass does make are collected as usual once it is over.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
