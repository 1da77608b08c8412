"""Which cluster a member is (docs/multicluster.md, "What a member can do"): a member reports its
kube-system Namespace uid, and the hub refuses a second registration of one cluster (the first keeps it);
a member that deletes the intermediates the hub wrote gets new ones at most once an hour, and is told."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tests.reconcile.test_hub_members import INTERMEDIATES, register
from tests.reconcile.test_hub_quiet import versions
from tls_injector.kube import CONFIG_MAPS, SECRETS, KubeApi
from tls_injector.names import CLUSTER_ID_ANNOTATION
from tls_injector.reconcile.federation import hub as hub_module
from tls_injector.reconcile.federation.hub import REISSUE_INTERVAL
from tls_injector.reconcile.federation.registry import Member, same_cluster
from tls_injector.reconcile.federation.report import MemberAck
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

UID = "6f1c0c1e-58b5-4e51-9d1e-3f2a1b0c9d8e"


@pytest.fixture
def hub_and_east() -> Iterator[tuple[Emulator, Emulator, Clock]]:
    clock = Clock(datetime.now(UTC))
    with ExitStack() as stack:
        the_hub, east = (stack.enter_context(running_emulator(seed=s, now=clock)) for s in (1, 2))
        for emu in (the_hub, east):
            namespace(emu, OWN_NS)
        yield the_hub, east, clock


def hub_reconciler(emu: Emulator, clock: Clock) -> Reconciler:
    return Reconciler(KubeApi(emu.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True), clock=clock)


def test_one_cluster_registered_under_two_names_is_served_once_and_stops_flipping(
        hub_and_east: tuple[Emulator, Emulator, Clock]) -> None:
    """Before: each hub pass re-issued both intermediates for one name and then the other, said
    "converged", and the member re-issued every leaf, for ever."""
    the_hub, east, clock = hub_and_east
    register(the_hub, "east", east.kubeconfig())
    register(the_hub, "east-again", east.kubeconfig())
    hub_pass, member = hub_reconciler(the_hub, clock), reconciler(east, clock, trust_domain="east.mesh")
    kube_system = east.get("namespaces", "kube-system")
    assert kube_system is not None
    # The first pass, before the member reported its uid, wrote east-again's intermediates over east's;
    # east's own are issued again once the hub's rate limit on a member's re-issue allows (REISSUE_INTERVAL).
    for _ in range(3):
        hub_pass.run_pass()
        member.run_pass()
        clock.advance(REISSUE_INTERVAL + timedelta(minutes=1))
    status = east.get("configmaps", "tls-injector-federation-status", OWN_NS)
    assert status is not None
    assert status["metadata"]["annotations"][CLUSTER_ID_ANNOTATION] == kube_system["metadata"]["uid"]
    before = versions(east)
    report = hub_pass.run_pass()
    member_report = member.run_pass()
    assert versions(east) == before  # nothing written in the member any more, by either side
    assert report.federation == {"east-again": (
        f"member east-again is the cluster registered already as member east (kube-system uid "
        f"{kube_system['metadata']['uid']}): nothing written; delete one of the two registrations")}
    assert member_report.converged
    assert member_report.write_count == 0


def member(name: str, created: str) -> Member:
    return Member(name, {"metadata": {"name": f"member-{name}", "creationTimestamp": created}}, b"")


def test_the_first_registration_keeps_a_cluster_and_a_later_one_claiming_it_is_refused() -> None:
    """A member that reports another member's uid refuses only itself: the older registration keeps it."""
    members = [member("zeta", "2026-01-01T00:00:00Z"), member("alpha", "2026-06-01T00:00:00Z"),
               member("quiet", "2026-02-01T00:00:00Z")]
    acks: dict[str, MemberAck | None] = {"zeta": MemberAck({}, frozenset(), UID),
                                         "alpha": MemberAck({}, frozenset(), UID), "quiet": None}
    assert list(same_cluster(members, acks)) == ["alpha"]
    assert same_cluster(members[:1] + members[2:], acks) == {}


def test_a_deleted_intermediate_is_reissued_at_most_once_an_hour_and_said(
        hub_and_east: tuple[Emulator, Emulator, Clock]) -> None:
    """Before: a member deleting its intermediate got a new one at every pass (and re-issued every leaf)."""
    the_hub, east, clock = hub_and_east
    register(the_hub, "east", east.kubeconfig())
    hub_pass = hub_reconciler(the_hub, clock)
    assert hub_pass.run_pass().reasons["member:serving:issued"] == 1
    # The hub reads no Secret in a member: it knows an intermediate is gone by its record there.
    KubeApi(east.api_client()).delete(SECRETS, INTERMEDIATES[0], namespace=OWN_NS)
    KubeApi(east.api_client()).delete(CONFIG_MAPS, INTERMEDIATES[0] + "-public", namespace=OWN_NS)
    for minutes in (6, 30, 23):  # 59 minutes after it was written
        clock.advance(timedelta(minutes=minutes))
        report = hub_pass.run_pass()
        assert east.get("secrets", INTERMEDIATES[0], OWN_NS) is None
        assert ("its record there is missing (deleted?); the hub issues a member's intermediate at most once "
                "every 1 h") in report.federation["east"], report.federation
        assert report.write_count == 0
        assert east.get("secrets", INTERMEDIATES[1], OWN_NS) is not None  # the other role is not held
    clock.advance(timedelta(minutes=1))
    report = hub_pass.run_pass()
    assert "east" not in report.federation, report.federation
    assert east.get("secrets", INTERMEDIATES[0], OWN_NS) is not None
    assert timedelta(hours=1) == hub_module.REISSUE_INTERVAL
