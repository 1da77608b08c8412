"""Leaf seals: they open only for the exact values sealed, under the key of the CA that sealed them."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tls_injector.pki import (
    CertKey,
    Decision,
    Sealed,
    SealedLeaf,
    make_ca,
    open_seal,
    renewal_time,
    seal,
    seal_key,
    sealed_leaf_renewal,
    sealed_window,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LEAF = SealedLeaf("shop", "web-tls", b"-----BEGIN CERTIFICATE-----\nMIIB\n", b"-----BEGIN PRIVATE KEY-----\nMIG\n",
                  ("web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local"))
WINDOW = {"not_before": NOW - timedelta(minutes=5), "not_after": NOW + timedelta(days=90)}


@pytest.fixture(scope="module")
def ca() -> CertKey:
    return make_ca(common_name="seal CA", now=NOW)


def test_a_seal_opens_for_the_same_values_and_gives_back_the_window(ca: CertKey) -> None:
    key = seal_key(ca)
    value = seal(key, LEAF, **WINDOW)
    assert open_seal(key, LEAF, value) == Sealed(**WINDOW)
    # The DNS names are a set: the order the workload lists them in does not matter.
    assert open_seal(key, dataclasses.replace(LEAF, dns_names=tuple(reversed(LEAF.dns_names))), value) is not None


@pytest.mark.parametrize("change", [
    {"namespace": "other"}, {"name": "api-tls"}, {"cert_pem": LEAF.cert_pem + b"\n"},
    {"key_pem": LEAF.key_pem[:-1]}, {"dns_names": LEAF.dns_names[:-1]},
    {"dns_names": (*LEAF.dns_names, "extra")}, {"namespace": "shopweb", "name": "-tls"},
])
def test_a_seal_does_not_open_once_any_sealed_value_changed(ca: CertKey, change: dict[str, object]) -> None:
    key = seal_key(ca)
    assert open_seal(key, dataclasses.replace(LEAF, **change), seal(key, LEAF, **WINDOW)) is None  # type: ignore[arg-type]


def test_a_seal_made_under_another_ca_does_not_open(ca: CertKey) -> None:
    other = make_ca(common_name="seal CA", now=NOW)
    assert seal_key(other) != seal_key(ca)
    assert open_seal(seal_key(ca), LEAF, seal(seal_key(other), LEAF, **WINDOW)) is None


@pytest.mark.parametrize("edit", [
    lambda v: v.replace(v.split()[2], str(int(v.split()[2]) + 86400 * 365)),  # a longer life
    lambda v: v.replace(v.split()[1], str(int(v.split()[1]) - 1)),
    lambda v: "v2" + v[2:],
    lambda v: v[:-1] + ("0" if v[-1] != "0" else "1"),
    lambda v: v + " ",
    lambda v: v.replace(" ", "  "),
    lambda v: v + "0" * 200,
    lambda v: "",
    lambda v: "v1 -1 -1 " + v.split()[3],
])
def test_an_edited_seal_does_not_open(ca: CertKey, edit: object) -> None:
    key = seal_key(ca)
    assert callable(edit)
    assert open_seal(key, LEAF, edit(seal(key, LEAF, **WINDOW))) is None


@given(value=st.text(max_size=300))
def test_no_string_opens_a_seal_or_raises(value: str) -> None:
    assert open_seal(b"k" * 32, LEAF, value) is None


@pytest.mark.parametrize(("now", "expected"), [
    (NOW - timedelta(minutes=6), Decision.because("not-yet-valid")),
    (NOW, Decision.keep(WINDOW["not_after"] - timedelta(days=35))),
    (WINDOW["not_after"] - timedelta(days=35, seconds=1), Decision.keep(WINDOW["not_after"] - timedelta(days=35))),
    (WINDOW["not_after"] - timedelta(days=35), Decision.because("expiring")),
    (WINDOW["not_after"] + timedelta(days=1), Decision.because("expiring")),
])
def test_an_opened_seal_leaves_only_the_time_to_judge(now: datetime, expected: Decision) -> None:
    assert sealed_leaf_renewal(Sealed(**WINDOW), now=now) == expected


def test_the_window_of_a_seal_just_made_is_what_opening_it_gives(ca: CertKey) -> None:
    key = seal_key(ca)
    value = seal(key, LEAF, **WINDOW)
    assert sealed_window(value) == open_seal(key, LEAF, value) == Sealed(**WINDOW)
    for no_seal in ("", "v1 1 2", "v2 1 2 ab", "v1 x 2 ab", "v1 1 2 " + "a" * 200):
        with pytest.raises(ValueError, match="not a seal"):
            sealed_window(no_seal)


def test_leaves_of_one_window_share_its_sealed_dates_and_renewal_time(ca: CertKey) -> None:
    """The reconciler's status keeps each leaf's end and renewal time between passes: leaves issued in the
    same second hold one object of each, not one per leaf (seal.REMEMBERED_WINDOWS)."""
    key = seal_key(ca)
    other = dataclasses.replace(LEAF, name="api-tls", dns_names=("api",))
    first, second = open_seal(key, LEAF, seal(key, LEAF, **WINDOW)), open_seal(key, other, seal(key, other, **WINDOW))
    assert first is not None
    assert second is first
    assert sealed_window(seal(key, LEAF, **WINDOW)) is first
    later = open_seal(key, LEAF, seal(key, LEAF, not_before=WINDOW["not_before"] + timedelta(seconds=1),
                                      not_after=WINDOW["not_after"]))
    assert later is not None
    assert later is not first
    assert later.not_before == first.not_before + timedelta(seconds=1)
    due = {"ca_end": None, "lookahead": timedelta(days=30), "duration": timedelta(days=90)}
    assert renewal_time(first.not_before, first.not_after, **due) is renewal_time(
        second.not_before, second.not_after, **due)
