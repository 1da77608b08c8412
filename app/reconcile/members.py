"""Multi-cluster (docs/multicluster.md): a member signs with the hub's intermediates and reports on the
hub's roots; a hub reads its members' reports, gates its root rotations on them and issues each member's
intermediates."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.kube import CONFIG_MAPS, NAMESPACES, SECRETS, KubeError
from tls_injector.pki import CaRole, CaSet, CertKey, TrustFacts
from tls_injector.reconcile import hub
from tls_injector.reconcile.discover import WorkloadRef
from tls_injector.reconcile.federation import (
    INTERMEDIATE_RECORDS,
    INTERMEDIATE_SECRETS,
    Intermediate,
    MemberAck,
    gate_roots,
    load_intermediate,
    members_from,
    names_another,
    roots_of,
    rotation_excluded,
    same_cluster,
)
from tls_injector.reconcile.hub import converge_member
from tls_injector.reconcile.ownership import is_owned
from tls_injector.reconcile.reports import Reports
from tls_injector.reconcile.state import PassReport

log = logging.getLogger("tls_injector.reconcile")




class Members(Reports):
    """A member's intermediates, a hub's members."""

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
