"""A member's report on the hub's roots (its tls-injector-federation-status) is the member's to write, so
anything may be in it (docs/multicluster.md, "What a member can do"): the hub parses it into a typed
record with every field checked, and one it cannot read is that member's reason and holds the rotation
for that member; it never stops the hub's pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tests.reconcile.test_hub_members import register
from tests.reconcile.test_hub_rotation import root_states
from tls_injector.kube import CONFIG_MAPS, SECRETS, KubeApi
from tls_injector.names import FORCE_REPLACE_ANNOTATION, IN_EVERY_BUNDLE_SINCE_PREFIX, ROOTS_IN_USE_ANNOTATION
from tls_injector.reconcile.federation.report import MAX_REPORTED_ROOTS, MemberAck, ReportUnreadable, read_ack
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

FP = "0123456789abcdef"
OURS = {"app.kubernetes.io/managed-by": "tls-injector", "tls-injector.io/role": "federation-status"}


def report(annotations: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "tls-injector-federation-status", "namespace": OWN_NS,
                         "labels": OURS if labels is None else labels, "annotations": annotations}}


def test_a_report_in_the_form_a_member_writes_is_read_with_its_times_in_utc() -> None:
    ack = read_ack(report({IN_EVERY_BUNDLE_SINCE_PREFIX + FP: "2034-01-02T05:04:05+02:00",
                           ROOTS_IN_USE_ANNOTATION: f"{FP},fedcba9876543210",
                           "kubectl.kubernetes.io/last-applied-configuration": "{}"}))
    assert ack == MemberAck({FP: datetime(2034, 1, 2, 3, 4, 5, tzinfo=UTC)},
                            frozenset({FP, "fedcba9876543210"}))
    assert ack.since[FP].tzinfo is UTC


def test_no_report_is_an_empty_one() -> None:
    assert read_ack(None) == MemberAck({}, frozenset())


@pytest.mark.parametrize(("annotations", "labels", "reason"), [
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + FP: "2034-01-02T03:04:05"}, None, "has no UTC offset"),
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + FP: "2034-01-02 03:04:05.123456"}, None, "has no UTC offset"),
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + FP: "yesterday"}, None, "is not an ISO 8601 time"),
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + FP: "2034-01-02T03:04:05+00:00" + " " * 60}, None, "characters long"),
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + "0123456789ABCDEF": "2034-01-02T03:04:05+00:00"}, None, "16 lowercase hex"),
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + FP[:15]: "2034-01-02T03:04:05+00:00"}, None, "16 lowercase hex"),
    ({ROOTS_IN_USE_ANNOTATION: f"{FP},not-a-root"}, None, "16 lowercase hex"),
    ({ROOTS_IN_USE_ANNOTATION: ",".join([FP] * (MAX_REPORTED_ROOTS + 1))}, None, "more than 16 roots"),
    ({IN_EVERY_BUNDLE_SINCE_PREFIX + f"{i:016x}": "2034-01-02T03:04:05+00:00"
      for i in range(MAX_REPORTED_ROOTS + 1)}, None, "more than 16"),
    ({}, {"app.kubernetes.io/managed-by": "someone"}, "not labelled as written by tls-injector"),
], ids=["naive", "naive-space", "not-a-time", "long-time", "upper-hex", "short-fp", "bad-in-use",
        "too-many-in-use", "too-many-since", "not-ours"])
def test_a_report_that_does_not_parse_says_why(annotations: dict[str, Any], labels: dict[str, str] | None,
                                               reason: str) -> None:
    with pytest.raises(ReportUnreadable, match=reason):
        read_ack(report(annotations, labels))


def test_exactly_the_most_roots_a_report_may_name_is_read() -> None:
    fps = [f"{i:016x}" for i in range(MAX_REPORTED_ROOTS)]
    ack = read_ack(report({**{IN_EVERY_BUNDLE_SINCE_PREFIX + fp: "2034-01-02T03:04:05+00:00" for fp in fps},
                           ROOTS_IN_USE_ANNOTATION: ",".join(fps)}))
    assert len(ack.since) == len(ack.in_use) == MAX_REPORTED_ROOTS


@pytest.fixture
def hub_and_east() -> Iterator[tuple[Emulator, Emulator, Clock]]:
    """A hub and one member, their API servers on one clock the test moves."""
    clock = Clock(datetime.now(UTC))
    with ExitStack() as stack:
        the_hub, east = (stack.enter_context(running_emulator(seed=s, now=clock)) for s in (1, 2))
        for emu in (the_hub, east):
            namespace(emu, OWN_NS)
        register(the_hub, "east", east.kubeconfig())
        yield the_hub, east, clock


def test_a_naive_time_in_a_report_is_that_members_reason_and_holds_the_rotation_for_it(
        hub_and_east: tuple[Emulator, Emulator, Clock]) -> None:
    """During a root rotation a member rewrites its report's time without its offset. Before: the hub's
    gate raised TypeError (offset-naive minus offset-aware) out of the whole pass, at every pass, since the
    member keeps the value. Now the pass goes on: the member is not ready with the reason, and the new root
    waits for it (the safe reading) until the report reads again."""
    the_hub, east, clock = hub_and_east
    hub_pass = Reconciler(KubeApi(the_hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True), clock=clock)
    member = reconciler(east, clock, trust_domain="east.mesh")
    for _ in range(2):
        assert not hub_pass.run_pass().aborted
        assert not member.run_pass().aborted
    [old] = root_states(the_hub)
    hub_api = KubeApi(the_hub.api_client())
    ca = hub_api.get(SECRETS, "tls-injector-ca", namespace=OWN_NS)
    ca["metadata"].setdefault("annotations", {})[FORCE_REPLACE_ANNOTATION] = "now"
    hub_api.replace(SECRETS, ca)
    assert not hub_pass.run_pass().aborted
    [new] = set(root_states(the_hub)) - {old}
    assert not member.run_pass().aborted  # reports the new root in every bundle, with an aware time

    east_api = KubeApi(east.api_client())
    status = east_api.get(CONFIG_MAPS, "tls-injector-federation-status", namespace=OWN_NS)
    key = IN_EVERY_BUNDLE_SINCE_PREFIX + new
    naive = datetime.fromisoformat(status["metadata"]["annotations"][key]).replace(tzinfo=None)
    status["metadata"]["annotations"][key] = naive.isoformat()
    east_api.replace(CONFIG_MAPS, status)

    for _ in range(3):  # long past the settle time: the rotation would have moved on with a good report
        clock.advance(timedelta(minutes=6))
        report = hub_pass.run_pass()
        assert not report.aborted, report.aborted
        assert root_states(the_hub)[new] == "untrusted"
    assert report.federation["east"].startswith("member east: report unreadable: "), report.federation
    assert "has no UTC offset" in report.federation["east"]

    # The member's own next pass writes its report again (a time with its offset): the rotation goes on.
    status = east_api.get(CONFIG_MAPS, "tls-injector-federation-status", namespace=OWN_NS)
    status["metadata"]["annotations"][key] = naive.replace(tzinfo=timezone(timedelta(hours=0))).isoformat()
    east_api.replace(CONFIG_MAPS, status)
    clock.advance(timedelta(minutes=6))
    report = hub_pass.run_pass()
    assert "east" not in report.federation, report.federation
    assert root_states(the_hub)[new] != "untrusted"
