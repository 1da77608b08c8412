"""What a reconciler holds between passes and what a pass reports: the settings, the report of a pass, and
the state the other parts share (backoff, announced conditions, what the CA and federation steps found).

The Reconciler is composed in layers, each a module of what it does (docs/reconcile.md, "The code"):
state (this), writes (writes, backoff, Events), reports (what a pass says), members (federation), trust
(the CA sets and their facts), reconciler (the passes themselves). Each layer uses only those below it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tls_injector import names
from tls_injector.injection.profile import ProfileBounds
from tls_injector.kube import KubeApi, NotFound, Resource
from tls_injector.pki import CaRole, CaSet, CertKey, service_name_constraints
from tls_injector.reconcile import events, signer
from tls_injector.reconcile import status as st
from tls_injector.reconcile.ca import CaPolicy, CaStep
from tls_injector.reconcile.discover import Target, WorkloadRef
from tls_injector.reconcile.federation import Hold, Intermediate, MemberAck
from tls_injector.reconcile.keypool import KeyPool
from tls_injector.reconcile.metrics import ReconcileMetrics
from tls_injector.reconcile.plan import Obj, Signing
from tls_injector.reconcile.webhook_plan import WebhookSettings

if TYPE_CHECKING:
    from tls_injector.reconcile.cache import ClusterCache


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
    # The bounds of workloads' certificate profiles (app/injection/profile.py, docs/injection.md).
    profiles: ProfileBounds = field(default_factory=ProfileBounds)
    # What one namespace may cost a pass, in seconds (budget.py): the loop's (NAMESPACE_TURN_SECONDS); None,
    # no bound: `reconcile --once` and the one-shot commands, where no other namespace waits behind it.
    turn_seconds: float | None = None

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
    # Workloads whose Secret name (names.SECRET_NAME_ANNOTATION) is no Secret name: nothing read or written.
    secret_names_refused: list[str] = field(default_factory=list)
    clients_refused: list[str] = field(default_factory=list)
    keystores_refused: list[str] = field(default_factory=list)  # keystores.Keystore.problem, one per Secret
    oversized: list[str] = field(default_factory=list)
    # Certificates issued naming no Service (discover.Target.namelessness): converged, as nothing the
    # reconciler could do would name them, but said, as no client can verify them.
    nameless: list[str] = field(default_factory=list)
    # Certificate Secrets issued with the default for a profile value refused (discover.Target.profile_refusal).
    profiles_refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # namespace -> the certificates issued or renewed there, one line each (told by one Event: writes.py's _tell_issued)
    issued: dict[str, list[str]] = field(default_factory=dict)
    # "<namespace>/<secret>" -> why its certificate waits for a CA that may sign (see plan.Waiting)
    waiting: dict[str, str] = field(default_factory=dict)
    # namespace -> why its trust bundle cannot be written (left out of the CA's rotation facts)
    excluded: dict[str, str] = field(default_factory=dict)
    # A hub: member name -> why it is not ready (absent when it is); a member: "intermediate-<role>" -> why
    # the hub's intermediate cannot be used (docs/multicluster.md)
    federation: dict[str, str] = field(default_factory=dict)
    # Namespaces whose certificates to issue were left for the loop's next turn, their budget of this one
    # spent (budget.py): the loop takes them again at once.
    deferred: set[str] = field(default_factory=set)
    # Namespaces with certificates left for a key not yet made (keypool.py): taken again once one is.
    for_keys: set[str] = field(default_factory=set)
    aborted: str = ""
    unavailable_streak: int = 0
    next_ca_step: datetime | None = None  # when a CA set can next move on time alone (ca.next_step_at)

    @property
    def refused(self) -> list[str]:
        """Every refusal of the pass, of any kind (the log, and `converged`)."""
        return [*self.conflicts, *self.names_refused, *self.clients_refused, *self.oversized, *self.profiles_refused,
                *self.keystores_refused, *self.secret_names_refused]

    @property
    def write_count(self) -> int:
        return sum(self.writes.values())

    @property
    def converged(self) -> bool:
        return not (self.refused or self.failed or self.waiting or self.aborted or self.excluded or self.federation
                    or self.deferred or self.for_keys)


@dataclass(frozen=True)
class WorkloadsPassed:
    """What the workloads' pass leaves for the rest: the CA set as stepped, the Secrets and their expiries."""

    cas: CaSet
    targets: list[Target]
    expiries: dict[tuple[str, str], datetime]
    renewals: dict[tuple[str, str], datetime] = field(default_factory=dict)  # when each is due (Expiries)


class ReconcilerState:
    """The state a reconciler keeps from pass to pass, and the reads every layer makes."""

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
        # The targets of the pass under way refused whole for a Secret name that is none: never planned,
        # shown in the status with their SecretNameRefused condition.
        self._refused_targets: list[Target] = []
        # Objects whose write failed: (failures in a row, not tried again before). A write the API server
        # keeps refusing is retried after 30 s, doubling up to the resync period, not at every pass.
        self._backoff: dict[tuple[str, str, str], tuple[int, datetime]] = {}
        self._failing: set[tuple[str, str, str]] = set()  # failed in the pass under way
        self.native = signer.NativeApis(api, mode=settings.pod_certificates)
        # What the last full pass saw, for the status API (tls_injector.reconcile.status); swapped in whole.
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
        # The long-running loop's cache (app/reconcile/cache.py): a pass reads it instead of listing, and
        # our writes go into it at once. None for `reconcile --once` and the other one-shot commands.
        self.cache: ClusterCache | None = None
        # The loop's keys made ahead (keypool.py; the controller starts its thread); None: made at the call.
        self.keys: KeyPool | None = None
        # What the last full pass signed with, and whether the cluster served pod certificates then: a
        # keyed pass (run_namespaces_pass) signs with the same, stepping no CA set (None: no full pass yet).
        self._signing: Signing | None = None
        self._native_served = False
        # The loop's Events, posted beside the pass (events.Outbox); None: each posted at once.
        self.outbox: events.Outbox | None = None

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

    def _writing(self, kind: str, key: tuple[str, str]) -> AbstractContextManager[None]:
        """While we write this object, its watch events are our own write's (ClusterCache.writing)."""
        return self.cache.writing(kind, key) if self.cache is not None else contextlib.nullcontext()

    def _guard(self) -> None:
        if not self.may_write():
            raise NotLeader("lost the leader lease")

    def _user_secret(self, role: CaRole) -> str | None:
        settings = self.settings
        return (settings.user_ca_secret if role == "serving" else settings.user_client_ca_secret) or None

    def _read_optional(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None only when the API confirmed it does not exist (any other error propagates)."""
        try:
            return self.api.get(resource, name, namespace=namespace or self.settings.namespace)
        except NotFound:
            return None


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
