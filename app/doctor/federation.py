"""Checks of a multi-cluster setup (docs/multicluster.md): in a hub (`doctor --hub`), every registered
member answers, agrees on the time and holds current intermediates from the hub's roots; in a member,
the hub's intermediates it signs with are usable."""

from __future__ import annotations

from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.reconcile.federation.issuance import INTERMEDIATE_SECRETS
from tls_injector.reconcile.federation.member import load_intermediate

CATEGORY = "multi-cluster"


def checks(snap: Snapshot) -> list[Result]:
    if "federation" in snap.errors:
        return [error(CATEGORY, "the multi-cluster objects can be read", snap.errors["federation"],
                      hint="doctor needs list and get on Secrets in the injector's namespace")]
    return hub_checks(snap) if snap.settings.hub else member_checks(snap)


def hub_checks(snap: Snapshot) -> list[Result]:
    if not snap.members:
        return [warning(CATEGORY, "members are registered", f"no Secret in {snap.settings.namespace} is labelled "
                        "as a member", hint="register each member as docs/multicluster.md says")]
    results = []
    for member in snap.members:
        title = f"member {member.name} holds current intermediates"
        if member.problem:
            results.append(error(CATEGORY, title, member.problem,
                                 hint="the hub's log and the MemberNotReady Events on the member's Secret say the "
                                      "same; docs/multicluster.md lists each reason and its fix"))
        elif member.pending:
            results.append(Result(CATEGORY, title, "warning", "; ".join(member.pending), tuple(member.current),
                                  hint="the hub's reconciler writes it on its next pass: check that it runs"))
        else:
            results.append(Result(CATEGORY, title, "ok", f"{len(member.current)} intermediates in place",
                                  tuple(member.current)))
    return results


def member_checks(snap: Snapshot) -> list[Result]:
    """Nothing to say in a standalone cluster (no intermediate); one line per intermediate in a member."""
    results = []
    for role, name in INTERMEDIATE_SECRETS.items():
        found = snap.intermediates.get(name)
        if found is None:
            continue
        title = f"the hub's {role} intermediate is usable"
        try:
            intermediate = load_intermediate(found, now=snap.now, trust_domain=snap.settings.trust_domain or
                                             snap.settings.cluster_domain)
        except ValueError as e:
            results.append(error(CATEGORY, title, str(e),
                                 hint="the reconciler goes on with the CAs it holds; the hub rewrites the Secret "
                                      "when it is its own (see the hub's doctor --hub)"))
            continue
        cert = intermediate.ca.cert
        results.append(ok(CATEGORY, title, f"{cert.subject.rfc4514_string()}, valid until "
                                           f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; "
                                           f"{len(intermediate.roots)} root(s) published"))
    return results
