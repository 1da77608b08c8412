"""Safety of the reconciler: outages, races, objects it does not own, CA keys, user-provided CAs."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import (
    OWN_NS,
    START,
    Clock,
    assert_every_leaf_trusted_by_every_bundle,
    ca_fingerprints,
    data,
    reconciler,
    small_cluster,
)
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.pki import fingerprint, load_certificates, make_ca
from tls_injector.reconcile.core.objects import encode_data
from tls_injector.reconcile.parts import writes


def test_an_unreachable_api_mints_no_ca_and_exactly_one_once_it_is_back(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    clock = Clock()
    kubeapi.outage(refuse=True)
    down = reconciler(kubeapi, clock).run_pass()
    assert down.aborted
    assert down.write_count == 0
    kubeapi.end_outage()
    kubeapi.outage(code=503)
    assert reconciler(kubeapi, clock).run_pass().aborted
    kubeapi.end_outage()
    assert kubeapi.get("secrets", "tls-injector-ca", OWN_NS) is None

    assert reconciler(kubeapi, clock).run_pass().converged
    assert reconciler(kubeapi, clock).run_pass().write_count == 0
    assert len(ca_fingerprints(kubeapi)) == 1


@pytest.mark.parametrize("code", [500, 503, 504, 403])
def test_a_failed_read_of_the_ca_secret_never_leads_to_creating_one(kubeapi: Emulator, code: int) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    kubeapi.fail_next("get", "secrets", "tls-injector-ca", code=code)
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.aborted
    assert kubeapi.calls("create", "secrets") == 0
    assert kubeapi.get("secrets", "tls-injector-ca", OWN_NS) is None


def test_two_reconcilers_racing_from_nothing_agree_on_one_ca_and_then_stop_writing(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=3)
    clock = Clock()
    racers = [reconciler(kubeapi, clock) for _ in range(2)]
    start = threading.Barrier(2)

    def race(index: int) -> None:
        start.wait()
        for _ in range(2):
            racers[index].run_pass()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ca_fingerprints(kubeapi)) == 1
    assert assert_every_leaf_trusted_by_every_bundle(kubeapi, clock.now) == len(secrets)
    kubeapi.reset_log()
    for _ in range(2):  # no flapping: whoever runs, nothing changes any more
        assert [r.run_pass().write_count for r in racers] == [0, 0]
    assert kubeapi.writes() == []


def test_a_secret_it_does_not_own_is_reported_and_left_untouched(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=2)
    theirs = kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                          "metadata": {"name": "app0-tls", "namespace": "ns0"},
                          "data": encode_data({"password": b"hunter2"})})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert not report.converged
    assert report.refused == ["Secret ns0/app0-tls exists and is not managed by tls-injector"]
    after = kubeapi.get("secrets", "app0-tls", "ns0")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert data(after) == {"password": b"hunter2"}
    assert kubeapi.get("secrets", "app1-tls", "ns0") is not None  # the others went on
    warnings = [e for e in kubeapi.objects("events", "ns0") if e["reason"] == "SecretConflict"]
    assert [e["involvedObject"]["name"] for e in warnings] == ["app0"]


def test_a_user_provided_ca_signs_and_its_key_stays_in_the_users_secret(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=1, per_namespace=2)
    user = make_ca(common_name="user CA", now=START)
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "my-ca", "namespace": OWN_NS},
                 "data": encode_data({"tls.crt": user.cert_pem, "tls.key": user.key_pem})})
    clock = Clock()
    rec = reconciler(kubeapi, clock, user_ca_secret="my-ca")
    assert rec.run_pass().converged
    assert ca_fingerprints(kubeapi) == {fingerprint(user.cert)}
    for ns, name in secrets:
        chain = load_certificates(data(kubeapi.get("secrets", name, ns))["tls.crt"])
        assert chain[0].issuer == user.cert.subject
    assert_no_ca_key_outside_its_secret(kubeapi, {user.key_pem}, home=("my-ca",))
    assert rec.run_pass().write_count == 0


def test_a_broken_ca_secret_stops_the_pass_instead_of_being_replaced(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    clock = Clock()
    reconciler(kubeapi, clock).run_pass()
    api = KubeApi(kubeapi.api_client())
    ca = api.get(SECRETS, "tls-injector-ca", namespace=OWN_NS)
    fp = next(iter(ca_fingerprints(kubeapi)))
    ca["data"][f"{fp}.key"] = encode_data({"k": make_ca(common_name="x", now=START).key_pem})["k"]
    api.replace(SECRETS, ca)
    kubeapi.reset_log()
    report = reconciler(kubeapi, clock).run_pass()
    assert "CaUnusable" in report.aborted
    assert kubeapi.writes() == []


def assert_no_ca_key_outside_its_secret(emu: Emulator, keys: set[bytes], *, home: tuple[str, ...]) -> None:
    """No object but the CA's own Secret(s) holds any CA private key, in any value."""
    assert keys
    for kind in ("secrets", "configmaps"):
        for obj in emu.objects(kind):
            if kind == "secrets" and obj["metadata"]["name"] in home and obj["metadata"]["namespace"] == OWN_NS:
                continue
            values = data(obj).values() if kind == "secrets" else [v.encode() for v in (obj.get("data") or {}).values()]
            for value in values:
                assert not any(key.strip() in value for key in keys), f"a CA key in {kind} {obj['metadata']['name']}"


def test_an_api_failing_mid_pass_stops_the_pass_after_three_objects_instead_of_trying_them_all(
    kubeapi: Emulator,
) -> None:
    small_cluster(kubeapi, namespaces=4, per_namespace=10)
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    rec.run_pass()
    clock.advance(timedelta(days=60))  # every leaf is due for renewal
    kubeapi.fail_next("update", "*", count=1000, code=503)
    kubeapi.reset_log()
    report = rec.run_pass()
    assert report.aborted.startswith("Unavailable")
    assert len(report.failed) == 2
    # The pass stops at the third failure it takes up; its updates are sent ahead (writes.IN_FLIGHT), so
    # those already sent then were tried too, and nothing after them: at most 10 of the 40 Secrets.
    assert writes.UNAVAILABLE_STREAK <= kubeapi.calls("update") <= writes.UNAVAILABLE_STREAK + writes.IN_FLIGHT - 1
