"""A member's intermediate is made for that member and role (its common name, under the root's
signature): one copied from another member into this one is re-issued, not kept and renewed as if it
were this member's (then two clusters would sign with one key, and a leak of one would be a leak of both)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from tls_injector.pki import load_certificates, make_root
from tls_injector.reconcile.federation.issuance import Roots, check_intermediate, decide_intermediate

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
NS = "tls-injector"


def roots() -> Roots:
    root = make_root("serving", now=NOW)
    return Roots("serving", root, (root.cert,))


def stored(body: dict, version: str = "7") -> dict:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": version}}


def test_an_intermediate_copied_from_another_member_is_reissued_for_this_one() -> None:
    hub = roots()
    east = decide_intermediate(None, roots=hub, member="east", namespace=NS, now=NOW)
    assert (east.action, east.known) == ("issue", False)
    # Kept where it belongs (decided from the hub's record there: the member's Secret is never read).
    assert decide_intermediate(stored(east.record), roots=hub, member="east", namespace=NS, now=NOW).action == "keep"
    # The same record found in west: re-issued, the Secret overwritten with a key of west's own, the record
    # at its resourceVersion.
    west = decide_intermediate(stored(east.record), roots=hub, member="west", namespace=NS, now=NOW)
    assert (west.action, west.reason, west.known) == ("issue", "renewed:another-member", True)
    assert west.record["metadata"]["resourceVersion"] == "7"
    assert "resourceVersion" not in west.secret["metadata"]
    cert = load_certificates(base64.b64decode(west.secret["data"]["tls.crt"]))[0]
    assert "west serving intermediate" in cert.subject.rfc4514_string()
    assert west.secret["data"]["tls.key"] != east.secret["data"]["tls.key"]
    assert "tls.key" not in west.record["data"]
    # doctor --hub says the same, before the hub's next pass.
    problem, note = check_intermediate(stored(east.record), roots=hub, member="west", namespace=NS, now=NOW)
    assert problem == ""
    assert note == "due: it was made for another member; the hub re-issues it on its next pass"


def test_a_member_whose_name_extends_another_is_not_taken_for_it() -> None:
    hub = roots()
    made = decide_intermediate(None, roots=hub, member="east", namespace=NS, now=NOW)
    assert decide_intermediate(stored(made.record), roots=hub, member="east-2", namespace=NS,
                               now=NOW).reason == "renewed:another-member"
