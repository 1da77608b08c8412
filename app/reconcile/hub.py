"""The hub's side of a pass (`reconcile --hub`, docs/multicluster.md): reach every registered member and
keep its intermediates current. One member that fails (a kubeconfig that does not load, an API that
does not answer, a namespace missing, an intermediate that is not ours) is reported and the others go on.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from app import names
from app.kube import (
    CONFIG_MAPS,
    NAMESPACES,
    SECRETS,
    Conflict,
    Forbidden,
    KubeApi,
    KubeError,
    NotFound,
    Unauthorized,
    Unavailable,
    member_client,
)
from app.reconcile.federation import (
    INTERMEDIATE_SECRETS,
    Member,
    MemberAck,
    Roots,
    Verdict,
    check_intermediate,
    clock_skew_problem,
    decide_intermediate,
    read_ack,
)

log = logging.getLogger("tls_injector.hub")
# One request to a member may take 10 s (connect and read): a member is another cluster, often across a
# WAN, but one that does not answer must not hold the others for the hub's 30 s --timeout per call. An
# unreachable member costs two such timeouts per pass: reading its report before the roots are stepped,
# and the visit after (whose first call, GET /version, fails). Members are visited one after another.
MEMBER_TIMEOUT_SECONDS = 10.0
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
                    guard: Callable[[], None]) -> MemberOutcome:
    """Both intermediates of one member, each written whole (chain and key) or not at all."""
    outcome = MemberOutcome(member.name)
    return _visit(member, outcome, lambda api: _MemberPass(api, member, namespace, clock, guard, outcome).run(roots))


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
            name = INTERMEDIATE_SECRETS[role_roots.role]
            try:
                existing: dict[str, object] | None = api.get(SECRETS, name, namespace=namespace)
            except NotFound:
                existing = None
            if existing is None and (missing := _namespace_missing(api, member.name, namespace)):
                return missing
            problem, note = check_intermediate(existing, roots=role_roots, member=member.name, namespace=namespace,
                                               now=clock())
            if problem:
                problems.append(problem)
            elif note.startswith("due"):
                outcome.pending += (f"{role_roots.role} intermediate {note}",)
            else:
                outcome.current += (note,)
        return "; ".join(problems)

    return _visit(member, outcome, look)


def member_ack(member: Member, *, namespace: str) -> MemberAck | None:
    """The member's report on the hub's roots (its FEDERATION_STATUS_CONFIGMAP). None when it cannot be
    read (kubeconfig, network, credentials, an object there that is not ours): the hub then holds every root
    rotation for it. No report at all is an empty one: the member has not joined yet (it writes one from
    its first pass with the hub's intermediates), so it trusts no root of the hub and holds nothing."""
    found: list[MemberAck | None] = [None]

    def look(api: KubeApi) -> str:
        try:
            found[0] = read_ack(api.get(CONFIG_MAPS, names.FEDERATION_STATUS_CONFIGMAP, namespace=namespace))
        except NotFound:
            found[0] = MemberAck({}, frozenset())
        return ""

    _visit(member, MemberOutcome(member.name), look)
    return found[0]


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


def _visit(member: Member, outcome: MemberOutcome, work: Callable[[KubeApi], str]) -> MemberOutcome:
    """Connect with the member's kubeconfig, do `work`, and turn every failure into a reason."""
    try:
        api = KubeApi(member_client(member.kubeconfig), timeout=MEMBER_TIMEOUT_SECONDS)
    except KubeError as e:
        outcome.problem = f"member {member.name}: its kubeconfig is not usable: {e}"
        return outcome
    try:
        outcome.problem = work(api)
    except (Unauthorized, Forbidden) as e:
        outcome.problem = f"member {member.name}: its API server refused the hub's credentials: {_short(e)}"
    except Unavailable as e:
        outcome.problem = f"member {member.name}: unreachable: {_short(e)}"
    except KubeError as e:
        outcome.problem = f"member {member.name}: {type(e).__name__}: {_short(e)}"
    except Exception as e:  # one member's surprise must not stop the pass for the others
        # A defect met on one member's data (as an unexpected Date header once was) is that member's
        # problem, reported like the others, with the type in the log to find it by.
        log.error("member visit failed", extra={"member": member.name, "error": type(e).__name__})
        outcome.problem = f"member {member.name}: internal error ({type(e).__name__}): {_short(e)}"
    finally:
        api.api_client.close()  # type: ignore[no-untyped-call]
    return outcome


@dataclass
class _MemberPass:
    api: KubeApi
    member: Member
    namespace: str
    clock: Callable[[], datetime]
    guard: Callable[[], None]
    outcome: MemberOutcome

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
        name, member = INTERMEDIATE_SECRETS[roots.role], self.member.name
        for _ in range(MAX_ATTEMPTS):
            try:
                existing = self.api.get(SECRETS, name, namespace=self.namespace)
            except NotFound:
                existing = None
            verdict = decide_intermediate(existing, roots=roots, member=member, namespace=self.namespace,
                                          now=self.clock())
            if verdict.action == "refuse":
                return verdict.problem
            if verdict.action == "keep":
                return ""
            self.guard()
            try:
                _write(self.api, verdict, existing, self.namespace)
            except Conflict:
                continue
            except NotFound:
                if verdict.action == "create":
                    return (f"member {member}: namespace {self.namespace} does not exist there (install "
                            "tls-injector in the member first)")
                continue  # deleted in between: decide again
            self.outcome.writes["update" if verdict.action == "replace" else verdict.action] += 1
            self.outcome.reasons += (f"{roots.role}:{verdict.reason}",)
            log.info("member intermediate written", extra={"member": member, "role": roots.role,
                                                           "action": verdict.action, "reason": verdict.reason})
            return ""
        return f"member {member}: Secret {self.namespace}/{name} kept changing under the hub; next pass"


def _write(api: KubeApi, verdict: Verdict, existing: dict[str, object] | None, namespace: str) -> None:
    body = verdict.body or {}
    if verdict.action == "create":
        api.create(SECRETS, body, namespace=namespace)
    elif verdict.action == "replace" and existing is not None and existing.get("type") != body.get("type"):
        # A Secret's type is immutable: a forced replacement of another type is a delete (at the version
        # decided on) and a create; in between the member signs with what its CA set already holds.
        meta = body["metadata"]
        api.delete(SECRETS, meta["name"], namespace=namespace, resource_version=meta.get("resourceVersion", ""))
        api.create(SECRETS, {**body, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}},
                   namespace=namespace)
    else:
        api.replace(SECRETS, body)


def _short(error: Exception) -> str:
    return " ".join(str(error).split())[:300]


