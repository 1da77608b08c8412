"""No member can hold a root rotation for ever (docs/multicluster.md, "What a member can do", "Revoking a
member"): one that keeps the rotation waiting past ROTATION_HOLD_DEADLINE is not ready with the reason
(log, MemberNotReady Event, metric and alert, status page, doctor --hub), and the operator's annotation on
its registration lets the rotation go on without it. And the revocation of a member, end to end: its
registration deleted and the root replaced, its leaves are trusted nowhere once the old root is gone.
The reconcilers run in process on one clock, the API servers' clocks moved with it (as test_hub_rotation)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.reconcile.cluster import OWN_NS, Clock, data, reconciler
from tests.reconcile.test_hub_members import CLIENT, NS, OPTED_IN, Federation, federation, run, webhook
from tests.reconcile.test_hub_rotation import bundles_of, leaves_of, root_states, untrusted
from tests.support.workloads import Shape
from tls_injector.doctor import DoctorSettings
from tls_injector.doctor.federation import hub_checks
from tls_injector.doctor.read import read
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.names import FORCE_REPLACE_ANNOTATION, ROTATION_EXCLUDED_ANNOTATION
from tls_injector.pki import UntrustedChain, dns_sans, fingerprint, load_certificates, make_root, verify_server
from tls_injector.pki.trust import CaRecord, CaSet, CaState
from tls_injector.reconcile.federation.holds import ROTATION_HOLD_DEADLINE, overdue_holds
from tls_injector.reconcile.federation.report import MemberAck
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

__all__ = ["federation", "webhook"]  # fixtures


class Rounds:
    """The hub and the members named, one pass each per round, the clock moved between rounds."""

    def __init__(self, fed: Federation, webhook: httpx.Client) -> None:
        self.fed = fed
        for emu in fed.members.values():
            for name in ("api", "caller"):
                run(emu, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}), service_account=f"{name}-sa")
        self.clock = Clock(datetime.now(UTC))
        self.hub = Reconciler(KubeApi(fed.hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True),
                              clock=self.clock)
        self.members = {name: reconciler(emu, self.clock, trust_domain=f"{name}.mesh")
                        for name, emu in fed.members.items()}

    def later(self, delta: timedelta) -> None:
        self.clock.now += delta
        self.fed.shift[0] += delta

    def round(self, *names: str, after: timedelta = timedelta(minutes=6)) -> PassReport:
        self.later(after)
        report = self.hub.run_pass()
        assert not report.aborted, report
        for name in names:
            assert not self.members[name].run_pass().aborted
        return report

    def until(self, done: Callable[[], bool], *names: str, rounds: int = 20) -> None:
        for _ in range(rounds):
            self.round(*names)
            if done():
                return
        raise AssertionError(f"not done after {rounds} rounds: {root_states(self.fed.hub)}")

    def replace_serving_root(self, *names: str) -> str:
        api = KubeApi(self.fed.hub.api_client())
        ca = api.get(SECRETS, "tls-injector-ca", namespace=OWN_NS)
        ca["metadata"].setdefault("annotations", {})[FORCE_REPLACE_ANNOTATION] = "now"
        api.replace(SECRETS, ca)
        old = set(root_states(self.fed.hub))
        self.round(*names)
        [new] = set(root_states(self.fed.hub)) - old
        return new

    def annotate_registration(self, member: str, key: str, value: str) -> None:
        api = KubeApi(self.fed.hub.api_client())
        secret = api.get(SECRETS, f"member-{member}", namespace=OWN_NS)
        secret["metadata"].setdefault("annotations", {})[key] = value
        api.replace(SECRETS, secret)


def test_a_member_that_never_reports_the_new_root_is_flagged_after_the_deadline_and_can_be_excluded(
        federation: Federation, webhook: httpx.Client) -> None:
    """West stops passing: its report never shows the new root. Before: the rotation waited for it for
    ever, with no word past "root rotation held" in the log; nothing let the operator go on without it."""
    rounds = Rounds(federation, webhook)
    rounds.round("east", "west")
    rounds.round("east", "west")
    new = rounds.replace_serving_root("east")
    assert root_states(federation.hub)[new] == "untrusted"
    report = rounds.round("east", after=timedelta(days=2))  # within the deadline: held, not yet flagged
    assert "west" not in report.federation, report.federation
    assert root_states(federation.hub)[new] == "untrusted"
    report = rounds.round("east", after=ROTATION_HOLD_DEADLINE)  # past it
    assert root_states(federation.hub)[new] == "untrusted"
    assert set(report.federation) == {"west"}, report.federation
    assert (f"it holds the serving root rotation: the new serving root {new} is not yet in every bundle it "
            "reports, for 5.") in report.federation["west"]
    assert f"annotate its registration {ROTATION_EXCLUDED_ANNOTATION}=<why>" in report.federation["west"]
    assert rounds.hub.metrics.member_ready.labels("west")._value.get() == 0
    events = [e for e in federation.hub.objects("events", OWN_NS) if e.get("reason") == "MemberNotReady"]
    assert any("holds the serving root rotation" in e["message"] for e in events), events
    # doctor --hub says it too, from the hub's CA set as stored and the member's report.
    settings = DoctorSettings(namespace=OWN_NS, cluster_domain="cluster.local", webhook=WebhookSettings(),
                              ca_secret="tls-injector-ca", hub=True)
    snap = read(KubeApi(federation.hub.api_client()), settings, now=rounds.clock.now)
    said = {r.title: r for r in hub_checks(snap)}
    assert said["member west holds current intermediates"].status == "error"
    assert "it holds the serving root rotation" in said["member west holds current intermediates"].message
    assert said["member east holds current intermediates"].status == "ok"

    # The operator goes on without west: the rotation moves to the new root, east signing under it.
    rounds.annotate_registration("west", ROTATION_EXCLUDED_ANNOTATION, "down for repair, ticket 123")
    rounds.until(lambda: root_states(federation.hub)[new] == "trusted-used", "east")
    report = rounds.round("east")
    assert "west" not in report.federation, report.federation
    # East's leaves stay trusted by every bundle of east throughout (untrusted() checks every pair).
    assert not [p for p in untrusted(federation, rounds.clock.now) if p.startswith("east") and "east bundle" in p]


def test_overdue_holds_names_each_member_past_the_deadline_for_doctor() -> None:
    now = datetime(2026, 11, 25, tzinfo=UTC)
    old, new = make_root("serving", now=now), make_root("serving", now=now)
    since = now - ROTATION_HOLD_DEADLINE - timedelta(hours=1)
    cas = CaSet((CaRecord(old.cert, old.key, CaState.TRUSTED_USED, since),
                 CaRecord(new.cert, new.key, CaState.UNTRUSTED, since)))
    fp16 = cas.records[1].fingerprint[:16]
    reported = MemberAck({fp16: now - timedelta(days=9)}, frozenset())
    silent = MemberAck({"0" * 16: now}, frozenset())
    acks: dict[str, MemberAck | None] = {"east": reported, "west": silent, "gone": None}
    held = overdue_holds({"serving": cas}, acks, now=now, settle=timedelta(minutes=5), excluded=frozenset({"gone"}))
    assert sorted(held) == ["west"]
    assert "for 3.0 days (more than 3)" in held["west"][0]
    assert overdue_holds({"serving": cas}, acks, now=since + ROTATION_HOLD_DEADLINE, settle=timedelta(minutes=5),
                         excluded=frozenset()) == {}


def test_a_member_is_revoked_end_to_end_registration_deleted_root_replaced_its_leaves_trusted_nowhere(
        federation: Federation, webhook: httpx.Client) -> None:
    """The documented way to cut a member off before its intermediates expire: delete its registration
    (the hub stops renewing it, and no rotation waits for it), replace the roots; once the old root has
    left every bundle, no cluster trusts a leaf of the revoked member."""
    rounds = Rounds(federation, webhook)
    rounds.round("east", "west")
    rounds.round("east", "west")
    west_leaf = leaves_of(federation.members["west"])["api-tls"]
    for bundle in bundles_of(federation.members["east"])[0]:  # trusted everywhere before
        verify_server(west_leaf[0], west_leaf[1:], trusted=bundle, dns_name=f"api.{NS}.svc", now=rounds.clock.now)
    KubeApi(federation.hub.api_client()).delete(SECRETS, "member-west", namespace=OWN_NS)
    [old] = root_states(federation.hub)
    rounds.replace_serving_root("east")
    rounds.until(lambda: old not in root_states(federation.hub), "east")
    rounds.until(lambda: all(old not in _fps(b) for b in bundles_of(federation.members["east"])[0]), "east")
    serving, _ = bundles_of(federation.members["east"])
    for bundle in serving:
        try:
            verify_server(west_leaf[0], west_leaf[1:], trusted=bundle, dns_name=f"api.{NS}.svc", now=rounds.clock.now)
        except UntrustedChain:
            continue
        raise AssertionError("a leaf of the revoked member is still trusted by a bundle of east")
    for chain in (c for name, c in leaves_of(federation.members["east"]).items() if "-client-" not in name):
        verify_server(chain[0], chain[1:], trusted=serving[-1], dns_name=_name(chain), now=rounds.clock.now)
    # What west still holds it signs with alone: the hub wrote nothing there after its registration went.
    stored = data(federation.members["west"].get("secrets", "tls-injector-intermediate-ca", OWN_NS))
    assert old in _fps(load_certificates(stored["ca.crt"]))


def _fps(certs: list[Any]) -> set[str]:
    return {fingerprint(c)[:16] for c in certs}


def _name(chain: list[Any]) -> str:
    return str(dns_sans(chain[0])[0])

