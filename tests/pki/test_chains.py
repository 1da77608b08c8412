"""certs.Chains: the leaves a pass hands the trust state machine, parsed only as far as they are read, and
read as the eager lists were (trust.observe's facts the same either way)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from tls_injector.pki import CaSet, Chains, add_ca, certs, issue_leaf, load_certificates, make_ca, observe, to_pem

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def two_cas() -> tuple[CaSet, list[str]]:
    """Two CAs in one set, and 20 leaves' tls.crt (base64, as a Secret carries it) of the second alone."""
    first, second = make_ca(common_name="first", now=NOW), make_ca(common_name="second", now=NOW)
    cas = add_ca(add_ca(CaSet(), first, now=NOW), second, now=NOW)
    leaves = [base64.b64encode(issue_leaf(issuer=second, dns_names=[f"w{n}"], now=NOW).chain_pem).decode()
              for n in range(20)]
    return cas, leaves


def test_chains_read_as_the_eager_lists_and_parse_only_what_is_read(
        two_cas: tuple[CaSet, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    _, leaves = two_cas
    pem = [to_pem(load_certificates(base64.b64decode(leaves[0])))]
    eager = [load_certificates(base64.b64decode(v)) for v in leaves] + [load_certificates(p) for p in pem]
    parsed: list[bytes] = []
    real = certs.load_certificates
    monkeypatch.setattr(certs, "load_certificates", lambda data: parsed.append(data) or real(data))
    chains = Chains(encoded=leaves, pem=pem)
    assert len(chains) == 21
    assert chains[2] == eager[2]
    assert len(parsed) == 3  # the first three, once each
    assert chains[0] == eager[0]
    assert len(parsed) == 3
    assert chains[-1] == eager[-1]
    assert chains[3:5] == eager[3:5]
    with pytest.raises(IndexError):
        chains[21]
    assert list(chains) == eager
    assert len(parsed) == 21  # each parsed once, however often read


def test_the_facts_from_chains_are_the_facts_from_lists(two_cas: tuple[CaSet, list[str]]) -> None:
    cas, leaves = two_cas
    eager = [load_certificates(base64.b64decode(v)) for v in leaves]
    lazy = observe(cas, bundles=[], leaves=Chains(encoded=leaves))
    assert lazy == observe(cas, bundles=[], leaves=eager)
    assert len(lazy.leaf_issuers) == 1  # the second CA only: the first is asked of every chain


@pytest.mark.parametrize("value", ["not base64!", "", None, 7, base64.b64encode(b"no PEM here").decode()])
def test_what_does_not_decode_or_parse_is_no_chain(value: object) -> None:
    assert list(Chains(encoded=[value])) == [[]]
