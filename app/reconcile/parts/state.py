"""What every part of a reconciler is handed, and what a pass reports: the settings (built by the command
that runs the reconciler, never changed after), the report of a pass, what the workloads' pass leaves for
the rest, and the one read every part makes (an object, or None when it does not exist).

The Reconciler composes parts, each an object with its own state (docs/reconcile.md, "The code"):
the announcer, the writer, the findings, the CA keeper, the member side or the hub side, and the
webhook's own pass. None reaches into another's fields; each is handed what it uses.
"""

from __future__ import annotations

import dataclasses
import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from tls_injector import names
from tls_injector.injection.profile import ProfileBounds
from tls_injector.kube import KubeApi, NotFound, Resource
from tls_injector.pki import CaRole, CaSet, service_name_constraints
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.core.discover import Target
from tls_injector.reconcile.core.objects import Obj
from tls_injector.reconcile.native import signer
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings


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

    def user_secret(self, role: CaRole) -> str | None:
        """The Secret of the user's own CA of `role`, if given."""
        return (self.user_ca_secret if role == "serving" else self.user_client_ca_secret) or None

    @property
    def workload_ca_policy(self) -> CaPolicy:
        """The workload CA's policy, its name constraints those of the cluster domain unless set; a hub's
        CA is a root that signs its members' intermediates (path length 1)."""
        policy = self.ca
        if self.hub:
            policy = dataclasses.replace(policy, path_length=max(policy.path_length, 1))
        if policy.permitted_dns:
            return policy
        return dataclasses.replace(policy, permitted_dns=service_name_constraints(self.cluster_domain))


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
    # "<namespace>/<secret>" -> why its certificate waits for a CA that may sign (see objects.Waiting)
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


def read_optional(api: KubeApi, resource: Resource, name: str, namespace: str) -> Obj | None:
    """The object, or None only when the API confirmed it does not exist (any other error propagates)."""
    try:
        return api.get(resource, name, namespace=namespace)
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
