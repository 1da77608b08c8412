"""The hub's side of a pass (`reconcile --hub`, docs/multicluster.md): reach every registered member and
keep its intermediates current. One member that fails (a kubeconfig that does not load, an API that
does not answer, a namespace missing, an intermediate that is not ours) is reported and the others go on.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from tls_injector import names
from tls_injector.kube import (
    CONFIG_MAPS,
    NAMESPACES,
    SECRETS,
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    KubeApi,
    KubeError,
    NotFound,
    Unauthorized,
    Unavailable,
    member_api,
)
from tls_injector.pki import CaRole
from tls_injector.reconcile.federation.issuance import (
    INTERMEDIATE_RECORDS,
    INTERMEDIATE_SECRETS,
    Roots,
    Verdict,
    check_intermediate,
    clock_skew_problem,
    decide_intermediate,
    not_ours,
)
from tls_injector.reconcile.federation.registry import Member
from tls_injector.reconcile.federation.report import MemberAck, ReportUnreadable, read_ack

log = logging.getLogger("tls_injector.hub")
# A member is another cluster, often across a WAN, and its API server is not ours to trust: one that
# answers slowly, or one byte at a time, must not hold the hub's pass. So each visit of a member (every
# call in it: connect, TLS, headers, body) ends within VISIT_DEADLINE_SECONDS, whatever the member does
# (app/kube/bounded.py), and members are visited side by side, so a slow one delays no other.
# 20 s: a visit makes 3 calls when nothing changes (GET /version, two Secrets) and at most 13 (two writes,
# each retried on a conflict three times); at a WAN round trip of 100-200 ms, with a TLS handshake, a
# healthy visit takes 1-3 s. A member that answers nothing costs the pass two deadlines at most (its report
# read before the roots are stepped, and the visit after), whatever the number of members.
VISIT_DEADLINE_SECONDS = 20.0
# And no single wait on a socket longer than 10 s within it (the connect to an address that drops packets).
MEMBER_TIMEOUT_SECONDS = 10.0
# The largest answer the hub reads from a member: the report ConfigMap, whose annotations the API server
# caps at 256 KiB in all, and the intermediate Secrets (~3 KiB each). 1 MiB is four times the largest
# legitimate answer; MAX_PARALLEL_VISITS visits at once hold at most 16 MiB of answers, against the hub's
# 256 MiB memory limit (a gzip answer of a few hundred KiB inflated to 1-2 GB before this cap).
MEMBER_ANSWER_LIMIT = 1024 * 1024
# Visits side by side: a thread each, up to 16 (more members wait for a free one, so a pass with n members
# that all hang costs ceil(n / 16) deadlines per phase).
MAX_PARALLEL_VISITS = 16
# A member that deletes its intermediates would get new ones at every pass, and re-issue every leaf each
# time: a deleted intermediate the hub wrote before is re-issued at most once an hour (24 a day at worst,
# where a pass every few minutes made hundreds), and said meanwhile. The member signs on with its CA set.
REISSUE_INTERVAL = timedelta(hours=1)
# A 409 on an intermediate means someone wrote it in between: read it again and decide again, twice more.
MAX_ATTEMPTS = 3


@dataclass
class MemberOutcome:
    name: str
    problem: str = ""  # empty: the member has current intermediates of both roles
    writes: Counter[str] = field(default_factory=Counter)  # by action: create, update, delete
    reasons: tuple[str, ...] = ()
    current: tuple[str, ...] = ()  # read only (`inspect_member`): each intermediate in place, for a person
    pending: tuple[str, ...] = ()  # read only: what the hub's next pass will write, and why

    @property
    def ready(self) -> bool:
        return not self.problem


def converge_member(member: Member, *, namespace: str, roots: tuple[Roots, ...], clock: Callable[[], datetime],
                    guard: Callable[[], None], issued: dict[tuple[str, CaRole], datetime] | None = None
                    ) -> MemberOutcome:
    """Both intermediates of one member, each written whole (chain and key) or not at all. `issued`: when
    this hub last wrote each (member, role) intermediate, kept across passes by the caller and updated here
    (each member's visit touches its own keys only)."""
    outcome = MemberOutcome(member.name)
    written = {} if issued is None else issued
    return _visit(member, outcome,
                  lambda api: _MemberPass(api, member, namespace, clock, guard, outcome, written).run(roots))


def inspect_member(member: Member, *, namespace: str, roots: tuple[Roots, ...],
                   clock: Callable[[], datetime]) -> MemberOutcome:
    """Read only (`doctor --hub`): the member answers, its clock agrees, and each intermediate is in place,
    from one of the hub's roots and not due for renewal (`current` describes each; `pending` what is due)."""
    outcome = MemberOutcome(member.name)

    def look(api: KubeApi) -> str:
        if skew := clock_skew_problem(member.name, api.server_date(), clock()):
            return skew
        problems = []
        for role_roots in roots:
            existing = _record(api, role_roots, namespace)
            if existing is None and (missing := _namespace_missing(api, member.name, namespace)):
                return missing
            problem, note = check_intermediate(existing, roots=role_roots, member=member.name, namespace=namespace,
                                               now=clock(), trust_domain=member.domain)
            if problem:
                problems.append(problem)
            elif note.startswith("due"):
                outcome.pending += (f"{role_roots.role} intermediate {note}",)
            else:
                outcome.current += (note,)
        return "; ".join(problems)

    return _visit(member, outcome, look)


def member_ack(member: Member, *, namespace: str) -> tuple[MemberAck | None, str]:
    """The member's report on the hub's roots (its FEDERATION_STATUS_CONFIGMAP), and why it cannot be used.
    None when it cannot be read (kubeconfig, network, credentials) or does not parse (`read_ack`: the report
    is the member's to write, so anything may be in it): the hub then holds every root rotation for it, and
    the reason is the member's. No report at all is an empty one: the member has not joined yet (it writes
    one from its first pass with the hub's intermediates), so it trusts no root of the hub and holds nothing."""
    found: list[MemberAck | None] = [None]

    def look(api: KubeApi) -> str:
        try:
            report = api.get(CONFIG_MAPS, names.FEDERATION_STATUS_CONFIGMAP, namespace=namespace)
        except NotFound:
            report = None
        try:
            found[0] = read_ack(report)
        except ReportUnreadable as e:
            return f"member {member.name}: report unreadable: {e}"
        return ""

    outcome = _visit(member, MemberOutcome(member.name), look)
    return found[0], outcome.problem


def _record(api: KubeApi, roots: Roots, namespace: str) -> dict[str, object] | None:
    """The hub's public record of a member's intermediate of one role (no key in it), None when absent."""
    try:
        return api.get(CONFIG_MAPS, INTERMEDIATE_RECORDS[roots.role], namespace=namespace)
    except NotFound:
        return None


def _namespace_missing(api: KubeApi, member: str, namespace: str) -> str:
    """A read cannot tell a missing Secret from a missing namespace (both 404); asking for the namespace
    can, when the identity may (the member Role the hub needs does not grant it: then nothing is said)."""
    try:
        api.get(NAMESPACES, namespace)
    except NotFound:
        return f"member {member}: namespace {namespace} does not exist there (install tls-injector in the member first)"
    except (Forbidden, Unauthorized):
        return ""
    return ""


_T = TypeVar("_T")


def each_member(members: Sequence[Member], visit: Callable[[Member], _T]) -> list[_T]:
    """`visit` of every member, side by side (each visit bounds itself: `_visit`), in the members' order."""
    if len(members) <= 1:
        return [visit(m) for m in members]
    with ThreadPoolExecutor(max_workers=min(len(members), MAX_PARALLEL_VISITS),
                            thread_name_prefix="member-visit") as pool:
        return list(pool.map(visit, members))


def _visit(member: Member, outcome: MemberOutcome, work: Callable[[KubeApi], str]) -> MemberOutcome:
    """Connect with the member's kubeconfig, do `work` within the visit's deadline, and turn every failure
    into a reason."""
    try:
        with member_api(member.kubeconfig, deadline=VISIT_DEADLINE_SECONDS, answer_limit=MEMBER_ANSWER_LIMIT,
                        timeout=MEMBER_TIMEOUT_SECONDS) as api:
            outcome.problem = _work(member, api, work)
    except KubeError as e:
        outcome.problem = f"member {member.name}: its kubeconfig is not usable: {e}"
    return outcome


def _work(member: Member, api: KubeApi, work: Callable[[KubeApi], str]) -> str:
    try:
        return work(api)
    except (Unauthorized, Forbidden) as e:
        return f"member {member.name}: its API server refused the hub's credentials: {_short(e)}"
    except Unavailable as e:
        return f"member {member.name}: unreachable: {_short(e)}"
    except KubeError as e:
        return f"member {member.name}: {type(e).__name__}: {_short(e)}"
    except Exception as e:  # one member's surprise must not stop the pass for the others
        # A defect met on one member's data (as an unexpected Date header once was) is that member's
        # problem, reported like the others, with the type in the log to find it by.
        log.error("member visit failed", extra={"member": member.name, "error": type(e).__name__})
        return f"member {member.name}: internal error ({type(e).__name__}): {_short(e)}"


@dataclass
class _MemberPass:
    api: KubeApi
    member: Member
    namespace: str
    clock: Callable[[], datetime]
    guard: Callable[[], None]
    outcome: MemberOutcome
    issued: dict[tuple[str, CaRole], datetime]

    def run(self, roots: tuple[Roots, ...]) -> str:
        """Why the member is not ready (empty when it is): the clocks first, then each role."""
        if skew := clock_skew_problem(self.member.name, self.api.server_date(), self.clock()):
            return skew
        problems: list[str] = []
        for role_roots in roots:
            problem = self.converge_role(role_roots)
            if problem and problem not in problems:  # a missing namespace is said once, not per role
                problems.append(problem)
        return "; ".join(problems)

    def converge_role(self, roots: Roots) -> str:
        """One role's intermediate, decided from the hub's record in the member (never from the Secret, which
        the hub's account may not read): a new one is written whole (Secret, then record), a roots change
        is the record's alone."""
        member = self.member.name
        for _ in range(MAX_ATTEMPTS):
            record = _record(self.api, roots, self.namespace)
            verdict = decide_intermediate(record, roots=roots, member=member, namespace=self.namespace,
                                          now=self.clock(), trust_domain=self.member.domain)
            if verdict.action in ("refuse", "keep"):
                return verdict.problem
            if verdict.action == "issue" and (wait := self._too_soon(roots.role, verdict.reason)):
                return wait
            self.guard()
            try:
                if verdict.action == "issue" and (problem := self._write_secret(verdict, roots.role)):
                    return problem
                self._write_record(verdict)
            except Conflict:
                continue  # the record changed in between: read it and decide again
            except NotFound:
                return (f"member {member}: namespace {self.namespace} does not exist there (install "
                        "tls-injector in the member first)")
            self.outcome.reasons += (f"{roots.role}:{verdict.reason}",)
            log.info("member intermediate written", extra={"member": member, "role": roots.role,
                                                           "action": verdict.action, "reason": verdict.reason})
            return ""
        return (f"member {member}: ConfigMap {self.namespace}/{INTERMEDIATE_RECORDS[roots.role]} kept changing "
                "under the hub; next pass")

    def _too_soon(self, role: CaRole, reason: str) -> str:
        """Why a new intermediate is not issued yet: this hub issued that member's intermediate of this role
        less than REISSUE_INTERVAL ago, so whatever the record says now (missing, deleted, or a member
        lying in it) waits. The bound on what a member can make the hub do with its record."""
        last = self.issued.get((self.member.name, role))
        if last is None or (due := last + REISSUE_INTERVAL) <= self.clock():
            return ""
        why = {"issued": "its record there is missing (deleted?)",
               "unrecorded": "its record there does not name an intermediate of the hub's roots"}.get(
            reason, f"its record there asks for one ({reason})")
        return (f"member {self.member.name}: the hub issued its {role} intermediate at {last:%Y-%m-%d %H:%M} UTC, "
                f"and {why}; the hub issues a member's intermediate at most once every "
                f"{REISSUE_INTERVAL.total_seconds() / 3600:g} h: next at {due:%H:%M} UTC")

    def _write_secret(self, verdict: Verdict, role: CaRole) -> str:
        """The new intermediate's Secret, written without reading the one there: create, or overwrite (PUT
        with no resourceVersion) when one exists; the member's tls-injector.hub-reach lets the hub overwrite
        only a Secret labelled ours or annotated force-replace, and a Forbidden says which was refused. A
        Secret of another type (its type cannot change) is deleted, which the policy allows for a
        force-replace one only, and created again. Why the write was refused, or ""."""
        body = verdict.secret or {}
        where = f"Secret {self.namespace}/{INTERMEDIATE_SECRETS[role]} in member {self.member.name}"
        try:
            self._put_secret(body, known=verdict.known)
        except Invalid as e:
            if "type" not in str(e):  # not the one case a delete and a create resolve
                return f"member {self.member.name}: {where} not written: {_short(e)}"
            try:
                self.api.delete(SECRETS, body["metadata"]["name"], namespace=self.namespace)
            except Forbidden:
                return not_ours(where)
            self.outcome.writes["delete"] += 1
            self.api.create(SECRETS, body, namespace=self.namespace)
            self.outcome.writes["create"] += 1
        except Forbidden as e:
            return f"{not_ours(where)} (the member said: {_short(e)[:200]})"
        self.issued[(self.member.name, role)] = self.clock()
        return ""

    def _put_secret(self, body: dict[str, object], *, known: bool) -> None:
        if known:  # the record names one of ours: it is there, unless someone deleted it since
            try:
                self.api.overwrite(SECRETS, body)
                self.outcome.writes["update"] += 1
                return
            except NotFound:
                pass
        try:
            self.api.create(SECRETS, body, namespace=self.namespace)
            self.outcome.writes["create"] += 1
        except AlreadyExists:
            self.api.overwrite(SECRETS, body)
            self.outcome.writes["update"] += 1

    def _write_record(self, verdict: Verdict) -> None:
        """The record, at the resourceVersion read (a Conflict: someone wrote it in between)."""
        body = verdict.record or {}
        if body["metadata"].get("resourceVersion"):
            self.api.replace(CONFIG_MAPS, body)
            self.outcome.writes["update"] += 1
        else:
            self.api.create(CONFIG_MAPS, body, namespace=self.namespace)
            self.outcome.writes["create"] += 1


def _short(error: Exception) -> str:
    return " ".join(str(error).split())[:300]


