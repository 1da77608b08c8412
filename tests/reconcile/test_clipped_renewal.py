"""A certificate its CA's end cut short is renewed at the share of the life it got, never at every pass.

A leaf never outlives its CA, so under a CA that ends before the profile's duration is up the leaf gets
less life than asked. Judged by the whole renew-before (8760h asks ~142 days) it was due the moment it was
issued, and every pass issued it again with the same end (pods reloading at every pass; ~0.3 s of CPU each
with rsa-4096). Through the reconciler's passes on the API emulator: over a grid of durations x
renew-before x the CA's remaining life (a user CA, and the built-in CA's own rotation window), a second
pass, and one a resync later, write nothing; renewal still comes before the end, and a rotated CA still
re-issues.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tests.reconcile.test_user_ca import put_user_ca
from tls_injector import names
from tls_injector.injection.profile import default_renew_before, format_duration, max_renew_before, parse_duration
from tls_injector.pki import (
    BACKDATE,
    CA_LOOKAHEAD,
    CertKey,
    issue_leaf,
    leaf_renewal,
    load_certificates,
    make_ca,
    make_root,
    renewal_time,
)
from tls_injector.reconcile.federation.issuance import (
    INTERMEDIATE_VALIDITY,
    Roots,
    check_intermediate,
    decide_intermediate,
)
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler

NS = "team-a"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
RESYNC = timedelta(minutes=10)

DURATIONS = ("24h", "2160h", "8760h")  # the operator's least, the default, the most (profile.ProfileBounds)
# renew-before: the least allowed (1h), unset (the built-in share, 35/90), the most allowed (two thirds)
RENEW_BEFORE = ("1h", None, "most")
# What is left of the CA's life when the workload arrives: a few hours, under the shortest duration, under
# the default one, under the longest, and longer than any (no leaf is cut short: the control).
REMAINING = (timedelta(hours=3), timedelta(days=10), timedelta(days=100), timedelta(days=400))


def _profile(duration: str, renew_before: str | None) -> dict[str, str]:
    asked = {names.DURATION_ANNOTATION: duration}
    if renew_before == "most":
        asked[names.RENEW_BEFORE_ANNOTATION] = format_duration(max_renew_before(parse_duration(duration)))
    elif renew_before is not None:
        asked[names.RENEW_BEFORE_ANNOTATION] = renew_before
    return asked


def _renew_before(asked: dict[str, str]) -> timedelta:
    duration = parse_duration(asked[names.DURATION_ANNOTATION])
    text = asked.get(names.RENEW_BEFORE_ANNOTATION)
    return parse_duration(text) if text else default_renew_before(duration)


def _user_ca_ending_in(remaining: timedelta) -> CertKey:
    return make_ca(common_name="user CA", now=NOW - timedelta(days=1), validity=remaining + timedelta(days=1))


def _leaf(emu: Emulator) -> Any:
    return load_certificates(data(emu.get("secrets", "web-tls", NS))["tls.crt"])[0]


def _issued(report: PassReport) -> int:
    """Leaf certificates the pass issued (new or renewed), whatever else it wrote (bundles, CA steps)."""
    return sum(n for reason, n in report.reasons.items() if reason.startswith(("issued:", "renewed:")))


def _cluster(emu: Emulator, asked: dict[str, str]) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, NS)
    deployment(emu, "web", NS, annotations=asked)


@pytest.mark.parametrize("remaining", REMAINING, ids=lambda r: f"ca-ends-in-{r.days}d{r.seconds // 3600}h")
@pytest.mark.parametrize("renew_before", RENEW_BEFORE, ids=lambda r: f"renew-before-{r or 'default'}")
@pytest.mark.parametrize("duration", DURATIONS)
def test_under_a_user_ca_a_second_pass_and_the_next_resync_write_nothing(
        kubeapi: Emulator, duration: str, renew_before: str | None, remaining: timedelta) -> None:
    asked = _profile(duration, renew_before)
    _cluster(kubeapi, asked)
    ca = _user_ca_ending_in(remaining)
    put_user_ca(kubeapi, ca)
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock, user_ca_secret="my-ca")
    first = rec.run_pass()
    assert first.converged, first.reasons
    assert _issued(first) == 1, first.reasons
    leaf = _leaf(kubeapi)
    granted = leaf.not_valid_after_utc - leaf.not_valid_before_utc - BACKDATE
    asked_life = parse_duration(duration)
    assert granted == min(asked_life, ca.cert.not_valid_after_utc - NOW)  # cut short exactly when the CA ends first
    second = rec.run_pass()
    assert second.write_count == 0, second.reasons
    clock.advance(RESYNC)
    assert rec.run_pass().write_count == 0
    # Renewed at the share of the life it got that the profile asks of a whole one, not before.
    renew_at = leaf.not_valid_after_utc - _renew_before(asked) * min(1.0, granted / asked_life)
    clock.now = renew_at - timedelta(seconds=2)
    assert rec.run_pass().write_count == 0
    clock.now = renew_at + timedelta(seconds=1)
    due = rec.run_pass()
    assert due.reasons["renewed:expiring"] == 1, due.reasons
    assert rec.run_pass().write_count == 0  # and the renewed one is not due either


def test_the_reported_case_8760h_under_a_user_ca_100_days_from_its_end(kubeapi: Emulator) -> None:
    """The review's case: three passes in a row each issued a new serial with the same end date."""
    _cluster(kubeapi, {names.DURATION_ANNOTATION: "8760h"})
    put_user_ca(kubeapi, _user_ca_ending_in(timedelta(days=100)))
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock, user_ca_secret="my-ca")
    assert _issued(rec.run_pass()) == 1
    serial = _leaf(kubeapi).serial_number
    for _ in range(3):
        clock.advance(RESYNC)
        assert rec.run_pass().write_count == 0
    assert _leaf(kubeapi).serial_number == serial
    status = rec.status
    assert status is not None
    [workload] = status.workloads
    # What the status API (and the page's "overdue" item) says is the renewal time the pass decides by.
    assert workload.renew_at is not None
    assert workload.renew_at > clock.now + timedelta(days=50)


def _walk(rec: Reconciler, clock: Clock, *, until: datetime, step: timedelta) -> tuple[int, int]:
    """Passes every `step` until `until`; after each pass that issues a leaf, another a minute later must
    issue none (never due at issue). Returns (passes, leaves issued)."""
    passes = issued = 0
    while clock.now < until:
        clock.advance(step)
        report = rec.run_pass()
        passes += 1
        if _issued(report):
            issued += _issued(report)
            clock.advance(timedelta(minutes=1))
            again = rec.run_pass()
            assert _issued(again) == 0, (clock.now, again.reasons)
    return passes, issued


def test_under_the_built_in_ca_through_two_rotations_a_leaf_is_issued_a_few_times_per_ca_not_per_pass(
        kubeapi: Emulator) -> None:
    """8760h under the built-in CA (one year, rotated 60 days before its end): every leaf is cut short, by
    the CA's end or by the time it has left; passes every two days through two CA lifetimes, the rotation
    windows included, issue a handful of leaves per CA (renewed at the share of the life it got, then
    re-issued by the next CA), never at consecutive passes."""
    _cluster(kubeapi, {names.DURATION_ANNOTATION: "8760h"})
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock)
    assert _issued(rec.run_pass()) == 1
    first_ca_end = _leaf(kubeapi).not_valid_after_utc
    passes, issued = _walk(rec, clock, until=NOW + timedelta(days=730), step=timedelta(days=2))
    assert passes >= 365
    assert issued <= 8, issued  # two CAs' lifetimes: ~3 each (on main: one at every pass of ~80 days a year)
    leaf = _leaf(kubeapi)
    assert leaf.not_valid_after_utc > first_ca_end + timedelta(days=300)  # moved on with the rotations
    assert leaf.not_valid_after_utc - clock.now > CA_LOOKAHEAD / 2  # and kept ahead of its end


def test_a_cut_short_leaf_still_moves_to_a_replaced_user_ca(kubeapi: Emulator) -> None:
    """Renewal later in a short life must not hold a leaf on a CA being replaced: the new CA re-issues it."""
    _cluster(kubeapi, {names.DURATION_ANNOTATION: "8760h"})
    put_user_ca(kubeapi, _user_ca_ending_in(timedelta(days=100)))
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock, user_ca_secret="my-ca")
    rec.run_pass()
    old_end = _leaf(kubeapi).not_valid_after_utc
    new = make_ca(common_name="user CA 2", now=NOW)
    put_user_ca(kubeapi, new)
    for _ in range(10):  # trusted first, then signing: a few passes a settle apart
        clock.advance(timedelta(minutes=6))
        rec.run_pass()
    leaf = _leaf(kubeapi)
    assert leaf.issuer == new.cert.subject
    assert leaf.not_valid_after_utc > old_end + timedelta(days=200)
    clock.advance(RESYNC)
    assert rec.run_pass().write_count == 0


def test_only_a_leaf_its_cas_end_cut_short_is_judged_by_the_life_it_got() -> None:
    """A leaf shorter than asked for another reason (issued before the profile grew, or stale) is renewed by
    the whole renew-before, at once when less than that is left, as docs/injection.md says; the same life
    ending with its CA is renewed at the share of it."""
    ca = make_ca(common_name="long CA", now=NOW - timedelta(days=1))
    short = issue_leaf(issuer=ca, dns_names=["web.team-a.svc"], now=NOW, validity=timedelta(days=10))
    kwargs: dict[str, Any] = {"desired_dns": ["web.team-a.svc"], "trusted": [ca.cert], "now": NOW, "issuer": ca.cert,
                              "duration": timedelta(days=90), "lookahead": timedelta(days=35)}
    assert leaf_renewal(cert_pem=short.chain_pem, key_pem=short.key_pem, **kwargs).reason == "expiring"
    ending = make_ca(common_name="ending CA", now=NOW - timedelta(days=1), validity=timedelta(days=11))
    cut = issue_leaf(issuer=ending, dns_names=["web.team-a.svc"], now=NOW, validity=timedelta(days=90))
    kwargs.update(trusted=[ending.cert], issuer=ending.cert)
    kept = leaf_renewal(cert_pem=cut.chain_pem, key_pem=cut.key_pem, **kwargs)
    assert kept.renew is False
    assert kept.due == cut.cert.not_valid_after_utc - timedelta(days=35) * (10 / 90)
    assert renewal_time(cut.cert.not_valid_before_utc, cut.cert.not_valid_after_utc,
                        ca_end=ending.cert.not_valid_after_utc, lookahead=timedelta(days=35),
                        duration=timedelta(days=90)) == kept.due


@pytest.mark.parametrize("left", [timedelta(days=179), timedelta(days=100), timedelta(days=59), timedelta(days=3)],
                         ids=lambda d: f"root-ends-in-{d.days}d")
def test_a_members_intermediate_its_roots_end_cut_short_is_not_reissued_at_every_hub_pass(left: timedelta) -> None:
    """The same for what a hub issues its members (180 days, renewed 60 days before its end): under a root
    with less than 180 days left, the intermediate was due at issue, and each hub pass issued it again with
    the same end, moving every leaf of the member to it each time."""
    root = make_root("serving", now=NOW - timedelta(days=1), validity=left + timedelta(days=1))
    hub = Roots("serving", root, (root.cert,))
    made = decide_intermediate(None, roots=hub, member="east", namespace=OWN_NS, now=NOW)
    assert made.action == "issue"
    record = {**made.record, "metadata": {**made.record["metadata"], "resourceVersion": "7"}}
    for later in (timedelta(0), RESYNC):
        assert decide_intermediate(record, roots=hub, member="east", namespace=OWN_NS, now=NOW + later).action == "keep"
    assert not check_intermediate(record, roots=hub, member="east", namespace=OWN_NS, now=NOW)[1].startswith("due")
    # Due at the third of its life that CA_LOOKAHEAD is of a whole one, not before.
    due = root.cert.not_valid_after_utc - CA_LOOKAHEAD * (left / INTERMEDIATE_VALIDITY)
    assert decide_intermediate(record, roots=hub, member="east", namespace=OWN_NS,
                               now=due - timedelta(seconds=1)).action == "keep"
    assert decide_intermediate(record, roots=hub, member="east", namespace=OWN_NS,
                               now=due).reason == "renewed:expiring"
