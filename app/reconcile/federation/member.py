"""The member's side of federation (docs/multicluster.md): the intermediate the hub wrote into a member's
Secret, checked before it is used (`load_intermediate`), with the roots the hub's record names, and whether
that record names another intermediate than the Secret holds (two writers raced). Pure.

A member's reconciler that finds those Secrets signs with them: the intermediate joins the member's CA
set as a user-provided CA does (the trust state machine, so a running single cluster turning member
keeps trusting its old CA until no leaf signed by it is in use), and every trust bundle it writes carries
the roots.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.pki import (
    CertKey,
    fingerprint,
    issued_by,
    load_certificates,
    load_user_ca,
    permitted_uri,
    to_pem,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.objects import Obj, secret_data
from tls_injector.reconcile.federation.issuance import record_data


@dataclass(frozen=True)
class Intermediate:
    """A hub-issued intermediate as a member uses it: the signer (its chain ends with the root that
    issued it) and every root of the role, which every bundle the member writes carries."""

    ca: CertKey
    roots: tuple[Any, ...]


def load_intermediate(obj: Obj, *, now: datetime, trust_domain: str = "", record: Obj | None = None) -> Intermediate:
    """The intermediate in a member's Secret, checked; ValueError with a reason a person can act on. One
    pinned to SPIFFE trust domains (a client intermediate) is used only when this cluster's `trust_domain`
    is one of them: every client certificate it signed otherwise would be refused by every peer. The roots
    are the hub's record's (`record`, which the hub keeps current without touching the key) when it names
    this very intermediate, else the Secret's ca.crt (the roots when it was issued)."""
    meta = obj.get("metadata") or {}
    where = f"Secret {meta.get('namespace')}/{meta.get('name')}"
    if not own.is_owned(obj, "intermediate"):
        raise ValueError(f"{where} is not labelled as written by a tls-injector hub; not used")
    data = secret_data(obj)
    chain = load_certificates(data.get("tls.crt", b""))
    roots = _recorded_roots(record, chain[0]) if chain else ()
    roots = roots or tuple(load_certificates(data.get("ca.crt", b"")))
    if not chain:
        raise ValueError(f"{where}: tls.crt holds no readable certificate")
    issuer = next((r for r in roots if issued_by(chain[0], r)), None)
    if issuer is None:
        raise ValueError(f"{where}: the intermediate was not issued by any root in its ca.crt")
    if trust_domain and (pinned := permitted_uri(chain[0])) and trust_domain not in pinned:
        raise ValueError(f"{where}: the intermediate signs SPIFFE IDs of trust domain {', '.join(pinned)} only, and "
                         f"this cluster's is {trust_domain}: run it with --trust-domain {pinned[0]}, or have the hub "
                         f"register it with annotation {names.MEMBER_TRUST_DOMAIN_ANNOTATION}={trust_domain}")
    try:
        ca = load_user_ca(to_pem([chain[0], issuer]), data.get("tls.key", b""), now=now)
    except ValueError as e:
        hint = " (is this cluster's clock behind the hub's?)" if "not valid before" in str(e) else ""
        raise ValueError(f"{where}: {e}{hint}") from e
    return Intermediate(ca, roots)


def names_another(record: Obj | None, secret: Obj) -> bool:
    """The hub's record (ours) names another intermediate than the Secret beside it holds: two writers
    raced (one cluster registered twice, before the hub knew), and the hub, deciding from the record alone,
    would keep what the member does not hold."""
    if record is None or not own.is_owned(record, "intermediate-record"):
        return False
    named = load_certificates(record_data(record).get("tls.crt", "").encode())
    held = load_certificates(secret_data(secret, keys=("tls.crt",)).get("tls.crt", b""))
    return bool(named and held) and fingerprint(named[0]) != fingerprint(held[0])


def _recorded_roots(record: Obj | None, intermediate: Any) -> tuple[Any, ...]:
    """The roots in the hub's record, when the record is ours and names `intermediate` (a record that lags
    behind a new intermediate, or names another, is not used: the Secret's own roots are then current)."""
    if record is None or not own.is_owned(record, "intermediate-record"):
        return ()
    data = record_data(record)
    named = load_certificates(data.get("tls.crt", "").encode())
    if not named or fingerprint(named[0]) != fingerprint(intermediate):
        return ()
    return tuple(load_certificates(data.get("ca.crt", "").encode()))
