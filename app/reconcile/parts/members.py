"""Multi-cluster (docs/multicluster.md), as two parts each constructed only where its role runs: the
member side (every reconciler that is not a hub) signs with the hub's intermediates and reports on the
hub's roots; the hub side reads its members' reports, gates its root rotations on them and issues each
member's intermediates.

Each holds only its own state and is handed what it uses: the API, the settings, the metrics; the hub
side also the announcer, the clock and the writer's guard. What they need of the CA sets (the roots as
stepped, the facts a report is made of) is handed to each call by the pass."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from tls_injector import names
from tls_injector.kube import CONFIG_MAPS, NAMESPACES, SECRETS, KubeApi, KubeError, Resource
from tls_injector.pki import CaRole, CaSet, CertKey, TrustFacts
from tls_injector.reconcile.ca.machine import CaStep
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.inputs import Observed
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Obj
from tls_injector.reconcile.core.ownership import is_owned
from tls_injector.reconcile.federation import hub
from tls_injector.reconcile.federation.holds import Hold, gate_roots
from tls_injector.reconcile.federation.hub import converge_member
from tls_injector.reconcile.federation.issuance import INTERMEDIATE_RECORDS, INTERMEDIATE_SECRETS, roots_of
from tls_injector.reconcile.federation.member import Intermediate, load_intermediate, names_another
from tls_injector.reconcile.federation.registry import members_from, rotation_excluded, same_cluster
from tls_injector.reconcile.federation.report import MemberAck, acknowledgement, status_body
from tls_injector.reconcile.native import signer
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.state import PassReport, ReconcileSettings, read_optional

log = logging.getLogger("tls_injector.reconcile")


class Facts(Protocol):
    """The bundles and leaves of a role in use in the namespaces given (trust.CaKeeper.facts)."""

    def __call__(self, role: CaRole, observed: Observed, targets: list[Target], namespaces: set[str], *,
                 native: signer.NativeView | None, now: datetime) -> tuple[Sequence[Any], Sequence[Any]]: ...


class MemberSide:
    """A member's intermediates from the hub, and its report on the hub's roots (none: standalone)."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, metrics: ReconcileMetrics) -> None:
        self._api = api
        self._settings = settings
        self._metrics = metrics
        # The hub's intermediates found in this pass, by role (docs/multicluster.md).
        self._intermediates: dict[CaRole, Intermediate] = {}
        # Per role, the namespaces whose bundles its report speaks of (set when the role's CA set was stepped
        # this pass); the report is made from what the pass leaves there.
        self._ack_scope: dict[CaRole, set[str]] = {}
        self._cluster_uid = ""  # its kube-system Namespace uid, once read (CLUSTER_ID_ANNOTATION)

    @property
    def federated(self) -> bool:
        """This pass found an intermediate of the hub's to use: the pass reports on the hub's roots."""
        return bool(self._intermediates)

    def read(self, report: PassReport, now: datetime, *, user_roles: Collection[CaRole]) -> None:
        """The hub's intermediates of this pass (`user_roles`: the roles of the user's own CAs, which take
        precedence); no CA set stepped yet."""
        self._intermediates, self._ack_scope = self._read_intermediates(report, now, user_roles), {}

    def stepped(self, role: CaRole, namespaces: set[str]) -> None:
        """`role`'s CA set was stepped on the bundles of `namespaces`: its report speaks of those."""
        if role in self._intermediates:
            self._ack_scope[role] = namespaces

    def _read(self, resource: Resource, name: str) -> Obj | None:
        return read_optional(self._api, resource, name, self._settings.namespace)

    def cluster_id(self) -> str:
        """This cluster's kube-system Namespace uid (read once: it never changes), "" when it cannot be read.
        A list by name, which the reconciler's RBAC already grants (it lists Namespaces), not a get."""
        if not self._cluster_uid:
            try:
                found = self._api.list_objects(NAMESPACES, field_selector="metadata.name=kube-system").items
            except KubeError as e:
                log.warning("kube-system Namespace not read: the report says no cluster id", extra={"error": str(e)})
                return ""
            self._cluster_uid = str(((found[0] if found else {}).get("metadata") or {}).get("uid") or "")
        return self._cluster_uid

    def _read_intermediates(self, report: PassReport, now: datetime,
                            user_roles: Collection[CaRole]) -> dict[CaRole, Intermediate]:
        """The hub's intermediates in this member's namespace, by role; none: standalone, as before. One
        that cannot be used is reported (log, report, metric) and left out: the CA set then goes on with
        what it holds, as it would without a hub. The user's own CA of a role (--ca-secret,
        --client-ca-secret) takes precedence over the hub's intermediate of that role, which is then
        not used (said in the log at every pass: that role's trust does not reach the other clusters)."""
        found: dict[CaRole, Intermediate] = {}
        for role, name in INTERMEDIATE_SECRETS.items():
            obj = self._read(SECRETS, name)
            if obj is None:
                if role in self._intermediates:  # held at the last pass: deleted here since
                    self._drop_record(role, report)
                continue
            if role in user_roles:
                log.warning("the hub's intermediate is not used: your own CA of that role takes precedence",
                            extra={"role": role, "secret": name, "user_secret": self._settings.user_secret(role)})
                continue
            record = self._read(CONFIG_MAPS, INTERMEDIATE_RECORDS[role])
            if names_another(record, obj):
                self._drop_record(role, report)
                record = None
            try:
                found[role] = load_intermediate(obj, now=now, trust_domain=self._settings.trust_domain or
                                                self._settings.cluster_domain, record=record)
            except ValueError as e:
                report.federation[f"intermediate-{role}"] = str(e)
                log.error("the hub's intermediate cannot be used", extra={"role": role, "reason": str(e)})
        for role in ("serving", "client"):
            self._metrics.member_intermediate.labels(role).set(int(role in found))
        return found

    def _drop_record(self, role: CaRole, report: PassReport) -> None:
        """The hub's intermediate Secret of `role`, used at the last pass, is gone (or the hub's record names
        another than it holds): delete the hub's record (at the version read), since the hub, which may not
        read a member's Secrets, decides from the record alone, and a record naming what is not here would
        leave this cluster without its intermediate until the hub's next renewal. The hub then issues a new
        one (at most once an hour)."""
        record = self._read(CONFIG_MAPS, INTERMEDIATE_RECORDS[role])
        if record is None or not is_owned(record, "intermediate-record"):
            return
        try:
            self._api.delete(CONFIG_MAPS, INTERMEDIATE_RECORDS[role], namespace=self._settings.namespace,
                            resource_version=str(record["metadata"].get("resourceVersion") or ""))
        except KubeError as e:
            log.warning("the hub's record of a deleted intermediate was not deleted", extra={"role": role,
                                                                                            "error": str(e)})
            return
        report.writes["delete"] += 1
        report.reasons["intermediate-record-dropped"] += 1
        log.warning("the hub's intermediate was deleted here: its record deleted, so the hub issues a new one",
                    extra={"role": role, "secret": INTERMEDIATE_SECRETS[role]})

    def ca(self, role: CaRole) -> CertKey | None:
        found = self._intermediates.get(role)
        return found.ca if found is not None else None

    def roots(self, role: CaRole) -> tuple[Any, ...]:
        found = self._intermediates.get(role)
        return found.roots if found is not None else ()

    def report_roots(self, after: Observed, targets: list[Target], native: signer.NativeView | None,
                     report: PassReport, now: datetime, *, facts: Facts) -> None:
        """A member: write its report on the hub's roots, from the bundles and leaves as this pass leaves
        them (`after`: what it read, with what it wrote), so the next pass, which reads them, reports the
        same and writes nothing; the write is counted with the pass's others. A client role with no client
        bundle in use yet has none that lacks its roots. Best effort: a report that cannot be written only
        holds the hub's next root rotation, which is the safe direction."""
        existing = self._read(CONFIG_MAPS, names.FEDERATION_STATUS_CONFIGMAP)
        previous = ((existing or {}).get("metadata") or {}).get("annotations") or {}
        annotations: dict[str, str] = {}
        in_use: set[str] = set()
        for role, found in self._intermediates.items():
            scope = self._ack_scope.get(role)
            bundles, leaves = ([], []) if scope is None else facts(role, after, targets, scope, native=native, now=now)
            part = acknowledgement(found.roots, bundles=bundles, leaves=leaves, previous=previous, now=now)
            in_use.update(v for v in part.pop(names.ROOTS_IN_USE_ANNOTATION).split(",") if v)
            annotations.update(part)
        annotations[names.ROOTS_IN_USE_ANNOTATION] = ",".join(sorted(in_use))
        if cluster_id := self.cluster_id():
            annotations[names.CLUSTER_ID_ANNOTATION] = cluster_id
        body = status_body(existing, self._settings.namespace, annotations)
        if body is None:
            return
        try:
            if existing is None:
                self._api.create(CONFIG_MAPS, body, namespace=self._settings.namespace)
            else:
                self._api.replace(CONFIG_MAPS, body)
            report.writes["create" if existing is None else "update"] += 1
            report.reasons["federation-status"] += 1
            log.info("report on the hub's roots written", extra={"annotations": annotations})
        except KubeError as e:
            log.warning("the report on the hub's roots was not written", extra={"error": str(e)})


class HubSide:
    """A hub's members: their reports read, its root rotations gated on them, their intermediates issued."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, metrics: ReconcileMetrics, announcer: Announcer,
                 *, clock: Callable[[], datetime], guard: Callable[[], None]) -> None:
        self._api = api
        self._settings = settings
        self._metrics = metrics
        self._announcer = announcer
        self._clock = clock
        self._guard = guard
        self._members: dict[str, str] = {}  # member -> why it is not ready ("" when it is), last pass
        # Each member's report on the roots, read before the CA sets are stepped (None: unreadable), and per
        # role the new roots held for members.
        self._acks: dict[str, MemberAck | None] = {}
        self._ack_problems: dict[str, str] = {}  # member -> why its report cannot be used, this pass
        # When it last wrote each member's intermediate of each role (re-issue of a deleted one is
        # rate-limited: hub.REISSUE_INTERVAL).
        self._issued: dict[tuple[str, CaRole], datetime] = {}
        self._held: dict[str, dict[str, Hold]] = {}
        self._excluded: frozenset[str] = frozenset()  # members no root rotation waits for

    @property
    def members(self) -> dict[str, str]:
        """Each member visited by the last pass, and why it is not ready ("" when it is)."""
        return self._members

    def begin(self) -> None:
        """A full pass starts: no member visited yet."""
        self._members = {}

    def read(self) -> None:
        """The members' reports of this pass, read before any CA set is stepped; no rotation held yet."""
        self._held = {}
        self._acks, self._ack_problems = self._read_acks()

    def gate(self, role: CaRole, now: datetime) -> Callable[[CaSet, TrustFacts], TrustFacts]:
        """Its CA set's facts with its members' reports (federation.gate_roots)."""
        settle = self._settings.ca.settle

        def gate(cas: CaSet, facts: TrustFacts) -> TrustFacts:
            gated, self._held[role] = gate_roots(cas, facts, self._acks, now=now, settle=settle,
                                                 excluded=self._excluded)
            return gated

        return gate

    def _read_acks(self) -> tuple[dict[str, MemberAck | None], dict[str, str]]:
        """Each member's report (None: unusable, which holds every rotation), and why one is unusable."""
        registered = self._api.list_objects(SECRETS, namespace=self._settings.namespace,
                                           label_selector=names.MEMBER_LABEL)
        members, _ = members_from(registered.items)
        self._excluded = rotation_excluded(members)
        for name in sorted(self._excluded):
            log.warning("member excluded from root rotations: its pods may meet peers they do not trust",
                        extra={"member": name, "annotation": names.ROTATION_EXCLUDED_ANNOTATION})
        read = hub.each_member(members, lambda m: hub.member_ack(m, namespace=self._settings.namespace))
        acks = {m.name: ack for m, (ack, _) in zip(members, read, strict=True)}
        return acks, {m.name: why for m, (_, why) in zip(members, read, strict=True) if why}

    def converge_members(self, report: PassReport, steps: Mapping[str, CaStep]) -> None:
        """Every registered member's intermediates, from the roots as this pass stepped them (`steps`: each
        CA set's step, by its Secret)."""
        settings = self._settings
        now = self._clock()
        roots = (roots_of("serving", steps.get(settings.workload_ca_policy.secret_name), now=now),
                 roots_of("client", steps.get(names.CLIENT_CA_SECRET), now=now))
        registered = self._api.list_objects(SECRETS, namespace=settings.namespace, label_selector=names.MEMBER_LABEL)
        members, problems = members_from(registered.items)
        problems |= same_cluster(members, self._acks)
        visited = [m for m in members if m.name not in problems]
        outcomes = hub.each_member(visited, lambda m: converge_member(
            m, namespace=settings.namespace, roots=roots, clock=self._clock, guard=self._guard, issued=self._issued))
        self._metrics.member_ready.clear()
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
            self._metrics.member_ready.labels(outcome.name).set(int(outcome.ready))
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
                self._announcer.announce((ref,), f"member/{outcome.name}", reason="MemberNotReady",
                                         message=outcome.problem, now=now)
