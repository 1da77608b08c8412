"""The status page's "Needs attention" list, in the order docs/operations.md gives: a stopped pass, then
certificates expiring or overdue (the first to end first), then certificates waiting or not issued, then
pods without the injection, then a CA rotation under way. A certificate with no date is not due "now"."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape

from tls_injector.reconcile.parts import status as snapshot
from tls_injector.web.page import attention_items, render_page
from tls_injector.web.status import CertificateAuthority, Condition, Pod, Status, Workload

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def workload(name: str, *, ends_in: timedelta | None, waiting: str = "", ns: str = "shop") -> Workload:
    """A workload as the pass records it: its conditions from what it was told (a wait, here)."""
    not_after = NOW + ends_in if ends_in is not None else None
    renew_at = not_after - 35 * DAY if not_after else None
    told = {"CertificateWaiting": waiting} if waiting else {}
    found = snapshot.conditions(told, not_after=not_after, renew_at=renew_at)
    return Workload(namespace=ns, workloads=(f"Deployment/{name}",), secret=f"{name}-tls", not_after=not_after,
                    renew_at=renew_at, waiting=waiting, conditions=tuple(Condition.model_validate(c) for c in found))


def status(*, aborted: str = "") -> Status:
    rotating = CertificateAuthority(ca_set="tls-injector-ca", role="serving", fingerprint="bbbbbbbbbbbbbbbb",
                                    subject="CN=new", root=True, not_after=NOW + 365 * DAY, state="untrusted",
                                    signs=False, waits_for="every bundle in use to carry it", next_step_at=None)
    return Status(pass_at=NOW, converged=False, aborted=aborted, cas=(rotating,), members=(),
                  pods_missing_injection=(Pod(namespace="shop", name="bare", workload="bare"),),
                  workloads=(
                      # "orphan" sorts first by namespace and Secret, and has no date: once counted as "now",
                      # it came before a certificate ending in 3 days.
                      workload("aaa-orphan", ends_in=None, waiting="the new CA to be in every bundle", ns="a"),
                      workload("fine", ends_in=80 * DAY),
                      workload("overdue", ends_in=20 * DAY),
                      workload("web", ends_in=3 * DAY),
                      workload("fresh", ends_in=None),
                  ))


def test_attention_is_ordered_stopped_pass_then_due_then_waiting_then_pods_then_rotation() -> None:
    texts = [text for _, text in attention_items(status(aborted="Unavailable: 503"), NOW)]
    assert [t.split(" ")[0:2] for t in texts] == [
        ["The", "last"], ["Certificate", "shop/web-tls"], ["Certificate", "shop/overdue-tls"],
        ["Certificate", "a/aaa-orphan-tls"], ["Certificate", "shop/fresh-tls"], ["Pod", "shop/bare"],
        ["CA", "rotation"]]
    assert "expires 2026-06-04 12:00 UTC (in 3 d)" in texts[1]
    assert "overdue for renewal" in texts[2]
    assert "waits: the new CA" in texts[3]
    assert "not issued yet" in texts[4]


def test_the_critical_items_come_before_every_warning_on_the_page() -> None:
    page = render_page(status(), sort="not_after", now=NOW)
    head = page[page.index("Needs attention"):page.index("Certificate authorities")]
    levels = re.findall(r"<li class='(\w+)'>([^<]*)</li>", head)
    assert [level for level, _ in levels] == ["crit", "crit", "warn", "warn", "warn", "warn"]
    assert unescape(levels[0][1]).startswith("Certificate shop/web-tls (Deployment/web) expires")
