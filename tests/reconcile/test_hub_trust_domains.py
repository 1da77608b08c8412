"""A member's client intermediate may sign SPIFFE IDs of its own trust domain only (a URI name constraint,
`spiffe://<member>.mesh` unless its registration names another), so no member can mint another member's
identities (docs/multicluster.md, "What a member can do"); and one trust domain belongs to one member."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from tests.reconcile.cluster import OWN_NS, data
from tests.reconcile.test_hub_members import Federation, federation
from tests.reconcile.test_mtls_chain import client_context, handshake, server_context
from tls_injector.names import MEMBER_LABEL, MEMBER_TRUST_DOMAIN_ANNOTATION
from tls_injector.pki import (
    UntrustedChain,
    issue_client,
    issue_leaf,
    load_certificates,
    make_root,
    permitted_uri,
    to_pem,
    verify_client,
)
from tls_injector.reconcile.federation.issuance import Roots, decide_intermediate
from tls_injector.reconcile.federation.member import load_intermediate
from tls_injector.reconcile.federation.registry import members_from

__all__ = ["federation"]  # the fixture
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
CLIENT_INTERMEDIATE = "tls-injector-client-intermediate-ca"


def _files(tmp_path: Path, name: str, chain: list[Any], key: Any) -> tuple[str, str]:
    cert, key_file = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert.write_bytes(to_pem(chain))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert), str(key_file)


def test_a_member_cannot_mint_another_members_spiffe_id_through_a_real_handshake(
        federation: Federation, tmp_path: Path) -> None:
    """East's client intermediate, as the hub wrote it into east, signs west's SPIFFE ID: a server trusting
    the federation's client roots (what west's bundles carry) refuses it in the TLS handshake (OpenSSL
    applies the constraint), and so does the project's own verifier; east's own ID is accepted by both.
    Before: both were accepted, so east could log in to west's servers as any of west's workloads."""
    code, out, err = federation.pass_hub()
    assert code == 0, (out, err)
    east_secret = federation.members["east"].get("secrets", CLIENT_INTERMEDIATE, OWN_NS)
    east_intermediate = load_intermediate(east_secret, now=datetime.now(UTC), trust_domain="east.mesh")
    assert permitted_uri(east_intermediate.ca.cert) == ("east.mesh",)
    client_roots = data(federation.members["west"].get("secrets", CLIENT_INTERMEDIATE, OWN_NS))["ca.crt"]
    server_ca = make_root("serving", now=datetime.now(UTC))
    server = issue_leaf(issuer=server_ca, dns_names=["api.shop.svc"], now=datetime.now(UTC))
    server_files = _files(tmp_path, "server", [server.cert], server.key)
    outcomes = {}
    for uri in ("spiffe://east.mesh/ns/shop/sa/caller-sa", "spiffe://west.mesh/ns/shop/sa/caller-sa"):
        leaf = issue_client(east_intermediate.ca, uris=[uri], now=datetime.now(UTC))
        client_files = _files(tmp_path, "client", [leaf.cert, east_intermediate.ca.cert], leaf.key)
        outcome = handshake(server_context(*server_files, client_cas=client_roots.decode()),
                            client_context(*client_files, server_cas=to_pem([server_ca.cert]).decode()),
                            server_name="api.shop.svc")
        try:
            verify_client(leaf.cert, [east_intermediate.ca.cert], trusted=load_certificates(client_roots),
                          now=datetime.now(UTC))
            verified = "verified"
        except UntrustedChain as e:
            verified = str(e)
        outcomes[uri] = (outcome.server, verified)
    own, forged = outcomes.values()
    assert own == ("accepted ['spiffe://east.mesh/ns/shop/sa/caller-sa']", "verified"), own
    assert "permitted subtree violation" in forged[0], forged
    assert "outside the name constraints" in forged[1], forged


def roots() -> Roots:
    root = make_root("client", now=NOW)
    return Roots("client", root, (root.cert,))


def stored(body: dict[str, Any], version: str = "7") -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": version}}


def test_a_client_intermediate_issued_before_the_pin_or_for_another_trust_domain_is_reissued() -> None:
    hub = roots()
    unpinned = decide_intermediate(None, roots=hub, member="east", namespace=OWN_NS, now=NOW,
                                   trust_domain="east.mesh")
    assert unpinned.record is not None
    assert decide_intermediate(stored(unpinned.record), roots=hub, member="east", namespace=OWN_NS, now=NOW,
                               trust_domain="east.mesh").action == "keep"
    moved = decide_intermediate(stored(unpinned.record), roots=hub, member="east", namespace=OWN_NS, now=NOW,
                                trust_domain="east.example.org")
    assert (moved.action, moved.reason) == ("issue", "renewed:trust-domain")
    assert moved.secret is not None
    cert = load_certificates(base64.b64decode(moved.secret["data"]["tls.crt"]))[0]
    assert permitted_uri(cert) == ("east.example.org",)
    # A serving intermediate names no URI: none pinned.
    serving_root = make_root("serving", now=NOW)
    serving = decide_intermediate(None, roots=Roots("serving", serving_root, (serving_root.cert,)), member="east",
                                  namespace=OWN_NS, now=NOW)
    assert serving.secret is not None
    assert permitted_uri(load_certificates(base64.b64decode(serving.secret["data"]["tls.crt"]))[0]) == ()


def test_a_member_running_with_another_trust_domain_does_not_use_the_client_intermediate() -> None:
    """Its client certificates would be refused by every peer: said, with the flag to set."""
    made = decide_intermediate(None, roots=roots(), member="east", namespace=OWN_NS, now=NOW)
    assert made.secret is not None
    with pytest.raises(ValueError, match=r"run it with --trust-domain east\.mesh"):
        load_intermediate(made.secret, now=NOW, trust_domain="cluster.local")
    assert load_intermediate(made.secret, now=NOW, trust_domain="east.mesh").ca is not None


def registration(name: str, trust_domain: str = "") -> dict[str, Any]:
    annotations = {MEMBER_TRUST_DOMAIN_ANNOTATION: trust_domain} if trust_domain else {}
    return {"metadata": {"name": f"member-{name}", "labels": {MEMBER_LABEL: name}, "annotations": annotations},
            "data": {"kubeconfig": base64.b64encode(b"apiVersion: v1").decode()}}


def test_one_trust_domain_belongs_to_one_member() -> None:
    members, problems = members_from([registration("east"), registration("west", "east.mesh"),
                                      registration("north", "north.example.org"), registration("south", "Bad!")])
    assert [(m.name, m.domain) for m in members] == [("north", "north.example.org")]
    assert problems["east"] == ("member east: trust domain east.mesh is claimed by more than one member "
                                "(east, west); none of them is used")
    assert "claimed by more than one member" in problems["west"]
    assert "is not a SPIFFE trust domain" in problems["south"]


def test_a_trust_domain_of_the_longest_form_is_taken() -> None:
    longest = "a" * 255
    [member], problems = members_from([registration("east", longest)])
    assert member.domain == longest
    assert problems == {}
    _, problems = members_from([registration("east", longest + "a")])
    assert "is not a SPIFFE trust domain" in problems["east"]
    made = decide_intermediate(None, roots=roots(), member="east", namespace=OWN_NS, now=NOW, trust_domain=longest)
    assert made.secret is not None
    assert permitted_uri(load_certificates(base64.b64decode(made.secret["data"]["tls.crt"]))[0]) == (longest,)
