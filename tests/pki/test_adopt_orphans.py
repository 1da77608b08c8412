"""A lost CA set adopts, as key-less zombies, the CAs that still-served leaves chain to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tls_injector.pki import SETTLE, CaSet, CaState, add_ca, adopt_orphans, advance, issue_leaf, make_ca, observe

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def lost() -> tuple[CaSet, list[object], list[object]]:
    """An old CA (its Secret is gone) whose leaf pods still serve, and a fresh set with a new signer."""
    old = make_ca(common_name="old", now=NOW - timedelta(days=30))
    leaf = issue_leaf(issuer=old, dns_names=["svc"], now=NOW - timedelta(days=1))
    fresh = add_ca(CaSet(), make_ca(common_name="new", now=NOW), now=NOW)
    return fresh, [[old.cert]], [[leaf.cert]]


def test_the_ca_of_a_still_served_leaf_stays_trusted_as_a_keyless_zombie(lost: tuple) -> None:
    fresh, bundles, leaves = lost
    adopted = adopt_orphans(fresh, bundles=bundles, leaves=leaves, now=NOW)
    assert sorted(adopted.states().values()) == sorted([CaState.TRUSTED_USED, CaState.ZOMBIE])
    zombie = adopted.in_state(CaState.ZOMBIE)[0]
    assert zombie.key is None
    assert zombie.cert == bundles[0][0]
    assert adopted.signer() == fresh.signer(), "the adopted CA never signs"


def test_the_adopted_ca_leaves_the_bundles_after_the_settle_time_like_any_replaced_ca(lost: tuple) -> None:
    fresh, bundles, leaves = lost
    adopted = adopt_orphans(fresh, bundles=bundles, leaves=leaves, now=NOW)
    facts = observe(adopted, bundles=bundles, leaves=[])
    assert advance(adopted, facts, now=NOW + SETTLE - timedelta(seconds=1)).states() == adopted.states()
    assert list(advance(adopted, facts, now=NOW + SETTLE).states().values()) == [CaState.TRUSTED_USED]


@pytest.mark.parametrize("case", ["no-leaf-chains-to-it", "expired", "already-known"])
def test_nothing_is_adopted_when(case: str, lost: tuple) -> None:
    fresh, bundles, leaves = lost
    if case == "no-leaf-chains-to-it":
        leaves = [[issue_leaf(issuer=make_ca(common_name="x", now=NOW), dns_names=["svc"], now=NOW).cert]]
    elif case == "expired":  # its leaf still chains to it, but it verifies nothing any more
        gone = make_ca(common_name="gone", now=NOW - timedelta(days=400), validity=timedelta(days=1))
        bundles = [[gone.cert]]
        leaves = [[issue_leaf(issuer=gone, dns_names=["svc"], now=NOW - timedelta(days=400)).cert]]
    else:
        fresh = adopt_orphans(fresh, bundles=bundles, leaves=leaves, now=NOW)
    assert adopt_orphans(fresh, bundles=bundles, leaves=leaves, now=NOW) is fresh
