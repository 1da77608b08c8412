"""Chain verification negatives, for the web-PKI verifier and the Ed25519 walk alike."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from tests.pki.conftest import NOW
from tls_injector.pki import (
    CertKey,
    KeyType,
    UntrustedChain,
    issue_leaf,
    make_ca,
    make_intermediate,
    verify_client,
    verify_server,
)

KEY_TYPES: list[KeyType] = ["ecdsa-p256", "ed25519"]


@dataclass(frozen=True)
class Pki:
    root: CertKey
    stranger: CertKey
    inter: CertKey
    leaf: CertKey


@pytest.fixture(scope="module", params=KEY_TYPES)
def pki(request: pytest.FixtureRequest) -> Pki:
    key_type: KeyType = request.param
    root = make_ca(common_name="root", now=NOW, key_type=key_type)
    inter = make_intermediate(root, domain="dc1", now=NOW, key_type=key_type)
    leaf = issue_leaf(issuer=inter, dns_names=["web", "web.shop"], now=NOW, key_type=key_type)
    return Pki(root, make_ca(common_name="root", now=NOW, key_type=key_type), inter, leaf)


def test_a_good_chain_verifies_up_to_the_trusted_root(pki: Pki) -> None:
    chain = verify_server(pki.leaf.cert, [pki.inter.cert], trusted=[pki.root.cert], dns_name="web.shop", now=NOW)
    assert chain == [pki.leaf.cert, pki.inter.cert, pki.root.cert]


@pytest.mark.parametrize(
    "case", ["wrong CA", "no CA", "wrong name", "missing intermediate", "leaf expired", "not yet valid"]
)
def test_a_broken_chain_is_untrusted(pki: Pki, case: str) -> None:
    args = {"intermediates": [pki.inter.cert], "trusted": [pki.root.cert], "dns_name": "web.shop", "now": NOW}
    args.update({
        "wrong CA": {"trusted": [pki.stranger.cert]},
        "no CA": {"trusted": []},
        "wrong name": {"dns_name": "web.other"},
        "missing intermediate": {"intermediates": []},
        "leaf expired": {"now": pki.leaf.cert.not_valid_after_utc + timedelta(seconds=1)},
        "not yet valid": {"now": pki.leaf.cert.not_valid_before_utc - timedelta(seconds=1)},
    }[case])
    intermediates = args.pop("intermediates")
    with pytest.raises(UntrustedChain):
        verify_server(pki.leaf.cert, intermediates, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_a_ca_certificate_or_a_wrong_usage_is_refused(key_type: KeyType) -> None:
    root = make_ca(common_name="root", now=NOW, key_type=key_type)
    inter = make_intermediate(root, domain="web", now=NOW, key_type=key_type)
    with pytest.raises(UntrustedChain):
        verify_server(inter.cert, [], trusted=[root.cert], dns_name="web", now=NOW)
    server_only = issue_leaf(issuer=root, dns_names=["web"], now=NOW, key_type=key_type)
    with pytest.raises(UntrustedChain):
        verify_client(server_only.cert, [], trusted=[root.cert], now=NOW)
    client_only = issue_leaf(issuer=root, dns_names=["web"], now=NOW, key_type=key_type, server=False, client=True)
    with pytest.raises(UntrustedChain):
        verify_server(client_only.cert, [], trusted=[root.cert], dns_name="web", now=NOW)
    assert verify_client(client_only.cert, [], trusted=[root.cert], now=NOW)[-1] == root.cert


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_an_intermediate_with_path_length_zero_cannot_vouch_for_another_ca(key_type: KeyType) -> None:
    root = make_ca(common_name="root", now=NOW, key_type=key_type)
    inter = make_intermediate(root, domain="dc1", now=NOW, key_type=key_type)
    sub = make_intermediate(inter, domain="too deep", now=NOW, key_type=key_type)
    leaf = issue_leaf(issuer=sub, dns_names=["web"], now=NOW, key_type=key_type)
    with pytest.raises(UntrustedChain):
        verify_server(leaf.cert, [sub.cert, inter.cert], trusted=[root.cert], dns_name="web", now=NOW)
    assert verify_server(leaf.cert, [], trusted=[sub.cert], dns_name="web", now=NOW)[-1] == sub.cert
