"""The hub's account in a member reads no Secret (docs/multicluster.md, "What a member can do"): the hub
decides every renewal from its public record beside each intermediate (a ConfigMap with the certificate and
the roots, no key) and writes the Secret without reading it. The member's emulator authorizes every request
of the hub as the member install's account, by the Role the install ships (tests/kubeapi/authz.py), so a
call that Role does not grant is a 403 here as on a real API server (tests/cluster/test_hub_least_privilege.py
proves the same on kube-apiserver)."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tests.reconcile.test_hub_members import INTERMEDIATES, register
from tests.reconcile.test_hub_quiet import versions
from tests.shipping.support import render_with_components
from tls_injector.kube import KubeApi
from tls_injector.names import CLIENT_INTERMEDIATE_CA_RECORD, INTERMEDIATE_CA_RECORD
from tls_injector.pki import load_certificates, make_intermediate, make_root
from tls_injector.reconcile.core.ownership import owner_labels
from tls_injector.reconcile.federation.hub import REISSUE_INTERVAL
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings

HUB = "system:serviceaccount:tls-injector:tls-injector-hub"
RECORDS = (INTERMEDIATE_CA_RECORD, CLIENT_INTERMEDIATE_CA_RECORD)


def member_install(emu: Emulator) -> None:
    """The hub's Role and RoleBinding as the member component ships them."""
    for obj in render_with_components("manifests/base", "manifests/components/member"):
        if obj["kind"] in ("Role", "RoleBinding") and obj["metadata"]["name"] == "tls-injector-hub":
            emu.add(obj)


@pytest.fixture
def hub_and_east() -> Iterator[tuple[Emulator, Emulator, Clock]]:
    clock = Clock(datetime.now(UTC))
    with ExitStack() as stack:
        hub, east = (stack.enter_context(running_emulator(seed=s, now=clock)) for s in (1, 2))
        for emu in (hub, east):
            namespace(emu, OWN_NS)
        member_install(east)
        east.acting_as = HUB
        register(hub, "east", east.kubeconfig())
        yield hub, east, clock


def hub_reconciler(emu: Emulator, clock: Clock) -> Reconciler:
    return Reconciler(KubeApi(emu.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True), clock=clock)


def calls(emu: Emulator) -> Counter[str]:
    """The requests the hub made in the member, by verb and resource (the member's report on the roots,
    which it has not written here, left out), a refused one with its status."""
    return Counter(f"{r.verb} {r.resource}" + (f" {r.code}" if r.code >= 400 else "") for r in emu.log
                   if r.name != "tls-injector-federation-status")


def secret(emu: Emulator, name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in ((emu.get("secrets", name, OWN_NS) or {}).get("data") or {}).items()}


def test_a_hub_that_may_read_no_secret_issues_renews_and_then_writes_nothing(
        hub_and_east: tuple[Emulator, Emulator, Clock]) -> None:
    """Before: the hub's first call in a member, GET of its intermediate Secret, was refused by the Role
    without Secret reads, and the member was not ready."""
    hub, east, clock = hub_and_east
    the_hub = hub_reconciler(hub, clock)
    report = the_hub.run_pass()
    assert report.federation == {}
    assert calls(east) == Counter({"get configmaps 404": 2, "create secrets": 2, "create configmaps": 2})
    issued = {name: secret(east, name) for name in INTERMEDIATES}
    assert all(load_certificates(s["tls.crt"]) and s["tls.key"] for s in issued.values())

    # Converged: one read of each record, no write.
    east.reset_log()
    before = versions(east)
    report = the_hub.run_pass()
    assert (report.federation, report.write_count) == ({}, 0)
    assert versions(east) == before
    assert calls(east) == Counter({"get configmaps": 2})

    # 121 days on, 59 before the intermediates end: renewed from the record, the Secrets overwritten blind.
    clock.advance(timedelta(days=121))
    east.reset_log()
    report = the_hub.run_pass()
    assert report.federation == {}
    assert report.reasons["member:serving:renewed:expiring"] == report.reasons["member:client:renewed:expiring"] == 1
    assert calls(east) == Counter({"get configmaps": 2, "update secrets": 2, "update configmaps": 2})
    for name, record in zip(INTERMEDIATES, RECORDS, strict=True):
        now = secret(east, name)
        assert now["tls.key"] != issued[name]["tls.key"]
        [cert] = load_certificates(now["tls.crt"])
        assert cert.not_valid_after_utc > clock.now + timedelta(days=170)
        stored = east.get("configmaps", record, OWN_NS) or {}
        assert load_certificates(stored["data"]["tls.crt"].encode()) == [cert]
        assert "tls.key" not in stored["data"]
    assert not any(r.verb in ("get", "list", "watch", "patch") and r.resource == "secrets" for r in east.log)


def forged_record(name: str) -> dict[str, Any]:
    """A record a member wrote itself: labelled ours, naming an intermediate of a root that is not the hub's."""
    now = datetime.now(UTC)
    root = make_root("serving", now=now)
    cert = make_intermediate(root, domain="east serving", now=now, validity=timedelta(days=1)).cert_pem
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": OWN_NS, "labels": owner_labels("intermediate-record")},
            "data": {"tls.crt": cert.decode(), "ca.crt": root.cert_pem.decode()}}


@pytest.mark.parametrize("lie", ["forged", "deleted", "an old one of its own"])
def test_a_member_lying_in_the_record_gets_at_most_one_new_intermediate_an_hour(
        hub_and_east: tuple[Emulator, Emulator, Clock], lie: str) -> None:
    """What a member can make the hub do with its record: issue that member a new intermediate, at most once
    an hour per role; nothing in the record is signed or passed on, and no other member is touched."""
    hub, east, clock = hub_and_east
    the_hub = hub_reconciler(hub, clock)
    the_hub.run_pass()
    first = east.get("configmaps", RECORDS[0], OWN_NS)
    clock.advance(timedelta(days=121))
    the_hub.run_pass()  # renewed: the first record is now an old one, expiring
    kept = secret(east, INTERMEDIATES[0])
    res = east.resource("configmaps")
    if lie == "deleted":
        east.store.delete(res, OWN_NS, RECORDS[0])
    else:
        current = east.get("configmaps", RECORDS[0], OWN_NS) or {}
        told = forged_record(RECORDS[0]) if lie == "forged" else first or {}
        east.store.update(res, OWN_NS, RECORDS[0], {**told, "metadata": {
            **told["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})
    for minutes in (6, 30, 23):  # within the hour after the hub last issued it
        clock.advance(timedelta(minutes=minutes))
        report = the_hub.run_pass()
        assert "the hub issues a member's intermediate at most once every 1 h" in report.federation["east"]
        assert report.write_count == 0
        assert secret(east, INTERMEDIATES[0]) == kept
    clock.advance(REISSUE_INTERVAL - timedelta(minutes=58))
    report = the_hub.run_pass()
    assert report.federation == {}
    assert report.write_count == 2  # the Secret, written blind, and the record
    renewed = secret(east, INTERMEDIATES[0])
    assert renewed["tls.key"] != kept["tls.key"]
    assert the_hub.run_pass().write_count == 0


def test_a_member_whose_intermediate_was_deleted_drops_the_hubs_record_and_gets_a_new_one_within_the_hour(
        hub_and_east: tuple[Emulator, Emulator, Clock]) -> None:
    """The hub cannot see a deleted Secret (it may not read one): the member's reconciler, which used it at
    its last pass, deletes the hub's record of it, and the hub issues anew once its rate limit allows."""
    hub, east, clock = hub_and_east
    the_hub, member = hub_reconciler(hub, clock), reconciler(east, clock, trust_domain="east.mesh")

    def member_pass() -> PassReport:
        east.acting_as = None  # the member's own reconciler, with its own account
        try:
            return member.run_pass()
        finally:
            east.acting_as = HUB

    the_hub.run_pass()
    assert member_pass().federation == {}
    east.store.delete(east.resource("secrets"), OWN_NS, INTERMEDIATES[0])
    report = member_pass()
    assert report.reasons["intermediate-record-dropped"] == 1
    assert east.get("configmaps", RECORDS[0], OWN_NS) is None
    assert east.get("configmaps", RECORDS[1], OWN_NS) is not None  # the other role untouched
    clock.advance(timedelta(minutes=30))
    assert "its record there is missing (deleted?)" in the_hub.run_pass().federation["east"]
    assert member_pass().reasons["intermediate-record-dropped"] == 0
    clock.advance(timedelta(minutes=31))
    report = the_hub.run_pass()
    assert (report.federation, report.reasons["member:serving:issued"]) == ({}, 1)
    assert east.get("secrets", INTERMEDIATES[0], OWN_NS) is not None
    assert member_pass().federation == {}
