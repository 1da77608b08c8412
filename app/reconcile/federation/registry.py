"""The members a hub has (docs/multicluster.md): its registrations (a Secret labelled MEMBER_LABEL with a
kubeconfig) read into `Member`s, each refused with its reason when its name, kubeconfig or trust domain is
not usable, or when it is a cluster registered already; and which members no root rotation waits for. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tls_injector import names
from tls_injector.reconcile.core.objects import Obj, secret_data
from tls_injector.reconcile.federation.issuance import default_trust_domain
from tls_injector.reconcile.federation.report import MemberAck

# A member's name is a DNS-1123 label: it goes into the intermediate's subject, metric labels and logs.
_MEMBER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# A SPIFFE trust domain: lowercase letters, digits, dots, dashes and underscores, at most 255 (the SPIFFE ID
# standard); the same form as --trust-domain takes.
_TRUST_DOMAIN = re.compile(r"^[a-z0-9._-]{1,255}$")


@dataclass(frozen=True)
class Member:
    """A member as registered in the hub: a Secret labelled MEMBER_LABEL=<name> with a kubeconfig, and the
    SPIFFE trust domain its client intermediate may sign (MEMBER_TRUST_DOMAIN_ANNOTATION, <name>.mesh)."""

    name: str
    secret: Obj
    kubeconfig: bytes
    trust_domain: str = ""

    @property
    def domain(self) -> str:
        return self.trust_domain or default_trust_domain(self.name)


def members_from(secrets: Sequence[Obj]) -> tuple[list[Member], dict[str, str]]:
    """The usable member registrations, and the others by name with why (a bad name, no kubeconfig, a
    name registered twice, a trust domain that is not one or that another member claims too: then neither
    is used, since which one is meant cannot be told)."""
    members, problems = _registered(secrets)
    return _one_trust_domain_each(members, problems)


def _one_trust_domain_each(members: list[Member], problems: dict[str, str]) -> tuple[list[Member], dict[str, str]]:
    """Two members whose client intermediates could sign the same SPIFFE IDs could log in as each other."""
    claims: dict[str, list[str]] = {}
    for member in members:
        claims.setdefault(member.domain, []).append(member.name)
    for domain, claimed in claims.items():
        for name in claimed if len(claimed) > 1 else ():
            problems[name] = (f"member {name}: trust domain {domain} is claimed by more than one member "
                              f"({', '.join(sorted(claimed))}); none of them is used")
    return [m for m in members if m.name not in problems], problems


def _registered(secrets: Sequence[Obj]) -> tuple[list[Member], dict[str, str]]:
    problems: dict[str, str] = {}
    found: dict[str, list[Obj]] = {}
    for secret in secrets:
        meta = secret.get("metadata") or {}
        name = str((meta.get("labels") or {}).get(names.MEMBER_LABEL) or "")
        if not _MEMBER_NAME.match(name):
            problems[f"secret/{meta.get('name')}"] = (f"Secret {meta.get('name')}: label {names.MEMBER_LABEL}="
                                                      f"{name[:70]!r} is not a DNS-1123 label (a member's name)")
            continue
        found.setdefault(name, []).append(secret)
    members = []
    for name, registered in sorted(found.items()):
        if len(registered) > 1:
            which = ", ".join(sorted(str(s["metadata"].get("name")) for s in registered))
            problems[name] = f"member {name} is registered by more than one Secret ({which}); none is used"
            continue
        kubeconfig = secret_data(registered[0], keys=(names.MEMBER_KUBECONFIG_KEY,)).get(names.MEMBER_KUBECONFIG_KEY)
        if not kubeconfig:
            problems[name] = (f"member {name}: Secret {registered[0]['metadata'].get('name')} has no "
                              f"{names.MEMBER_KUBECONFIG_KEY!r} key")
            continue
        domain = str(((registered[0].get("metadata") or {}).get("annotations") or {}).get(
            names.MEMBER_TRUST_DOMAIN_ANNOTATION) or "")
        if domain and not _TRUST_DOMAIN.match(domain):
            problems[name] = (f"member {name}: annotation {names.MEMBER_TRUST_DOMAIN_ANNOTATION}={domain[:70]!r} is "
                              "not a SPIFFE trust domain (lowercase letters, digits, '.', '-', '_')")
            continue
        members.append(Member(name, registered[0], kubeconfig, domain))
    return members, problems


def same_cluster(members: Sequence[Member], acks: dict[str, MemberAck | None]) -> dict[str, str]:
    """Registrations of a cluster registered already, by name with why: the same kube-system uid reported
    as another member's. The first registration (oldest Secret, then name) keeps it: a member that claims
    another's uid can refuse only itself, never a member registered before it."""
    first: dict[str, str] = {}
    refused: dict[str, str] = {}
    for member in sorted(members, key=lambda m: (str(m.secret.get("metadata", {}).get("creationTimestamp") or ""),
                                                 m.name)):
        uid = (acks.get(member.name) or MemberAck({}, frozenset())).cluster_id
        if not uid:
            continue
        if uid in first:
            refused[member.name] = (f"member {member.name} is the cluster registered already as member {first[uid]} "
                                    f"(kube-system uid {uid}): nothing written; delete one of the two registrations")
        else:
            first[uid] = member.name
    return refused


def rotation_excluded(members: Sequence[Member]) -> frozenset[str]:
    """Members whose registration is annotated ROTATION_EXCLUDED_ANNOTATION: no rotation waits for them."""
    return frozenset(m.name for m in members if names.ROTATION_EXCLUDED_ANNOTATION in
                     ((m.secret.get("metadata") or {}).get("annotations") or {}))
