"""How the hub holds a root rotation on its members' reports (docs/multicluster.md): a new root counts as in
every bundle once every member has reported it for the settle time, an old one as used while any member's
leaf chains to it (`gate_roots`); a member that holds a rotation past ROTATION_HOLD_DEADLINE is overdue
(`Hold`, `overdue_holds`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tls_injector import names
from tls_injector.pki import (
    CaRole,
    CaSet,
    CaState,
    TrustFacts,
)
from tls_injector.reconcile.federation.report import MemberAck

# How long a member may hold a root rotation before the hub says so (the member not ready: log, Event,
# metric and its alert, status page): a healthy member reports a new root within a pass or two of the
# settle time (minutes), and a generated root's rotation starts 60 days before the old root ends. Three
# days lets a member ride out a weekend's outage unflagged and leaves the operator 57 days to fix it, or
# to exclude it (ROTATION_EXCLUDED_ANNOTATION on its registration) and let the rotation go on.
ROTATION_HOLD_DEADLINE = timedelta(days=3)


@dataclass(frozen=True)
class Hold:
    """A root whose step waits for members: a new one not yet in every bundle of theirs (`new`), or an
    old one some leaf of theirs still chains to; `since` when the root entered its present state."""

    members: tuple[str, ...]
    since: datetime
    new: bool

    def overdue(self, now: datetime) -> bool:
        return now - self.since > ROTATION_HOLD_DEADLINE

    def overdue_reason(self, role: str, root: str, now: datetime) -> str:
        """What a member holding this rotation past the deadline is told (its not-ready reason)."""
        what = (f"the new {role} root {root} is not yet in every bundle it reports" if self.new
                else f"some leaf it reports still chains to the old {role} root {root}")
        days = (now - self.since).total_seconds() / 86400
        return (f"it holds the {role} root rotation: {what}, for {days:.1f} days (more than "
                f"{ROTATION_HOLD_DEADLINE.days}); fix the member, or annotate its registration "
                f"{names.ROTATION_EXCLUDED_ANNOTATION}=<why> to go on without it")


def overdue_holds(sets: dict[CaRole, CaSet], acks: dict[str, MemberAck | None], *, now: datetime,
                  settle: timedelta, excluded: frozenset[str]) -> dict[str, list[str]]:
    """Per member, each root rotation it has held past ROTATION_HOLD_DEADLINE (for `doctor --hub`, from
    the hub's CA sets as stored and the members' reports)."""
    found: dict[str, list[str]] = {}
    for role, cas in sets.items():
        _, holds = gate_roots(cas, TrustFacts(frozenset(), frozenset()), acks, now=now, settle=settle,
                              excluded=excluded)
        for root, hold in holds.items():
            for member in hold.members if hold.overdue(now) else ():
                found.setdefault(member, []).append(hold.overdue_reason(role, root, now))
    return found


def gate_roots(cas: CaSet, facts: TrustFacts, acks: dict[str, MemberAck | None], *, now: datetime,
               settle: timedelta, excluded: frozenset[str] = frozenset()) -> tuple[TrustFacts, dict[str, Hold]]:
    """The hub's facts with its members' reports: a new root counts as in every bundle only once every
    member has reported it in every bundle in use for `settle`; an old root counts as used while any member
    reports a leaf chaining to it. A member whose report cannot be read holds both (the safe reading).
    A member that reports nothing at all (no root in its bundles, no leaf on one) has not joined yet: its
    pods trust none of the hub's roots, so it holds nothing (else a standalone cluster turned hub, whose
    first root cannot sign intermediates, would wait forever for members that can get none). A member in
    `excluded` (annotated so by a person) holds nothing: its pods may then meet peers they do not trust.
    Returns the facts and, per root (16 hex) still held, the members it waits for and since when."""
    everywhere, used = set(facts.in_every_bundle), set(facts.leaf_issuers)
    held: dict[str, Hold] = {}
    acks = {m: a for m, a in acks.items() if (a is None or a.since or a.in_use) and m not in excluded}
    for record in cas.records:
        fp16 = record.fingerprint[:16]
        if record.state is CaState.UNTRUSTED:
            waiting = [m for m, ack in sorted(acks.items())
                       if ack is None or (since := ack.since.get(fp16)) is None or now - since < settle]
            if waiting:
                everywhere.discard(record.fingerprint)
                held[fp16] = Hold(tuple(waiting), record.since, new=True)
        using = [m for m, a in sorted(acks.items()) if a is None or fp16 in a.in_use]
        if record.state is CaState.PHASE_OUT and using:
            used.add(record.fingerprint)
            held[fp16] = Hold(tuple(using), record.since, new=False)
    return TrustFacts(frozenset(everywhere), frozenset(used)), held
