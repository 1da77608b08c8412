"""Replacing a user-provided CA (`--ca-secret`): the new CA is trusted before it signs, leaves move to it,
the old one stays trusted until no leaf uses it, and certificates that need a CA meanwhile wait, saying why."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, START, Clock, ca_fingerprints, data, deployment, reconciler, small_cluster
from tests.reconcile.test_leader import _wait_for as wait_for
from tests.reconcile.test_leader import running_loop
from tests.reconcile.test_reconcile_safety import assert_no_ca_key_outside_its_secret
from tls_injector.cli import main
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.pki import (
    CaSet,
    CertKey,
    add_ca,
    bundle_certificates,
    fingerprint,
    issued_by,
    load_certificates,
    make_ca,
    verify_server,
)
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.inputs import Signing
from tls_injector.reconcile.core.leaves import decide_leaf
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Waiting, Write, encode_data, secret_data
from tls_injector.reconcile.loop.controller import next_pass_delay
from tls_injector.reconcile.parts.reconciler import Reconciler

PASS_EVERY = timedelta(minutes=1)


def put_user_ca(emu: Emulator, ca: CertKey, name: str = "my-ca", *, key_pem: bytes | None = None) -> None:
    """What a person does: put a CA certificate and its key (`key_pem`: another one) into the Secret
    named by --ca-secret (or --client-ca-secret)."""
    api = KubeApi(emu.api_client())
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": OWN_NS},
            "data": encode_data({"tls.crt": ca.cert_pem, "tls.key": key_pem or ca.key_pem})}
    existing = emu.get("secrets", name, OWN_NS)
    if existing is None:
        api.create(SECRETS, body, namespace=OWN_NS)
        return
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    api.replace(SECRETS, body)


def leaves(emu: Emulator) -> list[dict[str, Any]]:
    return [s for s in emu.objects("secrets")
            if (s["metadata"].get("labels") or {}).get("tls-injector.io/role") == "leaf"]


def assert_every_leaf_verifies_against_every_bundle_in_use(emu: Emulator, now: datetime) -> None:
    """Bundles in use: every trust-bundle ConfigMap and every leaf Secret's ca.crt (a client may trust its
    peers through its own certificate mount). Each leaf is verified against each, as a TLS client would."""
    bundles = [bundle_certificates(cm.get("data") or {}) for cm in emu.objects("configmaps")
               if cm["metadata"]["name"] == "tls-injector-trust-bundle"]
    bundles += [load_certificates(data(s)["ca.crt"]) for s in leaves(emu)]
    assert bundles
    for secret in leaves(emu):
        chain = load_certificates(data(secret)["tls.crt"])
        host = f"{secret['metadata']['name'][:-4]}.{secret['metadata']['namespace']}.svc"
        for trusted in bundles:
            verify_server(chain[0], chain[1:], trusted=trusted, dns_name=host, now=now)


def issuers(emu: Emulator, *cas: CertKey,
            secrets: Callable[[Emulator], list[dict[str, Any]]] = leaves) -> dict[str, str]:
    """Each leaf Secret ("<namespace>/<name>"; `secrets` chooses which) -> the SHA-256 of the CA among `cas`
    its certificate is issued by."""
    found = {}
    for secret in secrets(emu):
        leaf = load_certificates(data(secret)["tls.crt"])[0]
        (issuer,) = [fingerprint(ca.cert) for ca in cas if issued_by(leaf, ca.cert)]
        found[f"{secret['metadata']['namespace']}/{secret['metadata']['name']}"] = issuer
    return found


def waiting_gauge(metrics: ReconcileMetrics) -> float:
    value = metrics.registry.get_sample_value("tls_injector_certificates_waiting")
    assert value is not None, generate_latest(metrics.registry).decode()
    return value


def test_a_replaced_user_ca_is_trusted_first_then_signs_and_every_leaf_moves_within_30_minutes(
    kubeapi: Emulator,
) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    old, new = make_ca(common_name="user CA 1", now=START), make_ca(common_name="user CA 2", now=START)
    put_user_ca(kubeapi, old)
    clock = Clock()
    metrics = ReconcileMetrics()
    rec: Reconciler = reconciler(kubeapi, clock, metrics=metrics, user_ca_secret="my-ca")
    assert rec.run_pass().converged
    assert set(issuers(kubeapi, old, new).values()) == {fingerprint(old.cert)}

    clock.advance(timedelta(days=30))
    put_user_ca(kubeapi, new)  # the old key is gone from the cluster from this moment on
    deployment(kubeapi, "late", "ns0")  # a workload that needs a certificate while no CA may sign
    replaced_at, waited, delays, moved_at = clock.now, [], [], None
    for _ in range(30):
        report = rec.run_pass()
        assert not report.aborted, report
        delays.append(next_pass_delay(report, now=clock.now, resync_seconds=600))
        assert_every_leaf_verifies_against_every_bundle_in_use(kubeapi, clock.now)
        waited.append(dict(report.waiting))
        assert waiting_gauge(metrics) == len(report.waiting)
        chained_to = issuers(kubeapi, old, new)
        if moved_at is None and set(chained_to.values()) == {fingerprint(new.cert)} and len(chained_to) == 5:
            moved_at = clock.now
        if moved_at and fingerprint(old.cert) not in ca_fingerprints(kubeapi) and report.converged:
            break
        clock.advance(PASS_EVERY)

    assert moved_at is not None, waited
    assert moved_at - replaced_at <= timedelta(minutes=30)
    assert ca_fingerprints(kubeapi) == {fingerprint(new.cert)}  # the old CA left the bundles at the end
    # The new workload waited, and was told why, for as long as no CA could sign; then it got its certificate.
    assert "ns0/late-tls" in waited[0]
    assert "not yet in every trust bundle" in waited[0]["ns0/late-tls"]
    assert sum(1 for w in waited if w) >= 5  # the kubelet propagation wait (5 minutes) at least
    assert not waited[-1]
    # Seen in every bundle at the second pass: the loop's next pass is when the 5-minute settle ends.
    assert delays[1] == 300
    assert delays[-1] == 600  # one CA left, nothing to wait for: back to the resync period
    events = [e for e in kubeapi.objects("events", "ns0")
              if e["reason"] == "CertificateWaiting" and e["involvedObject"]["name"] == "late"]
    assert len(events) == 1  # told once per wait, not once per pass
    assert len(issuers(kubeapi, new)) == len(secrets) + 1
    # Neither key was ever stored anywhere but the user's own Secret.
    assert_no_ca_key_outside_its_secret(kubeapi, {old.key_pem, new.key_pem}, home=("my-ca",))
    assert rec.run_pass().write_count == 0


TARGET = Target("apps", "web-tls", ("web", "web.apps.svc"), (WorkloadRef("Deployment", "apps", "web"),))


def between_user_cas() -> tuple[Signing, Signing]:
    """The set signing with the old user CA, and the set right after it was replaced (old key gone)."""
    old, new = make_ca(common_name="user CA 1", now=START), make_ca(common_name="user CA 2", now=START)
    signing = Signing.of(add_ca(CaSet(), old, now=START), now=START)
    keyless = CaSet(tuple(dataclasses.replace(r, key=None) for r in signing.cas.records))
    return signing, Signing.of(add_ca(keyless, new, now=START), now=START, waiting="because")


def stored(write: object) -> dict[str, Any]:
    assert isinstance(write, Write)
    assert write.body is not None
    return {**write.body, "metadata": {**write.body["metadata"], "resourceVersion": "1"}}


def test_while_no_ca_may_sign_a_missing_certificate_waits_and_nothing_is_written() -> None:
    _, waiting = between_user_cas()
    assert waiting.signer is None
    outcome = decide_leaf(TARGET, None, waiting)
    assert outcome == Waiting("Secret apps/web-tls: certificate issue waits: because", None)


def test_while_no_ca_may_sign_a_valid_leaf_is_kept_and_its_ca_crt_gains_the_new_ca() -> None:
    signing, waiting = between_user_cas()
    existing = stored(decide_leaf(TARGET, None, signing))
    refresh = decide_leaf(TARGET, existing, waiting)
    assert isinstance(refresh, Write)
    assert refresh.reason == "refreshed"
    assert secret_data(refresh.body)["tls.crt"] == secret_data(existing)["tls.crt"]
    assert secret_data(refresh.body)["ca.crt"] == waiting.bundle_pem.encode()


def test_while_no_ca_may_sign_a_forced_renewal_waits_keeping_its_annotation_and_refreshing_ca_crt() -> None:
    signing, waiting = between_user_cas()
    existing = stored(decide_leaf(TARGET, None, signing))
    existing["metadata"]["annotations"]["tls-injector.io/force-renew"] = "yes"
    outcome = decide_leaf(TARGET, existing, waiting)
    assert isinstance(outcome, Waiting)
    assert outcome.message == "Secret apps/web-tls: certificate renewal (force-renew) waits: because"
    assert outcome.refresh is not None
    assert outcome.refresh.body is not None
    assert outcome.refresh.body["metadata"]["annotations"]["tls-injector.io/force-renew"] == "yes"
    assert secret_data(outcome.refresh.body)["ca.crt"] == waiting.bundle_pem.encode()
    assert decide_leaf(TARGET, stored(outcome.refresh), waiting) == Waiting(outcome.message, None)


def test_reconcile_once_during_a_replacement_exits_one_and_says_why_certificates_wait(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    now = datetime.now(UTC)
    put_user_ca(kubeapi, make_ca(common_name="user CA 1", now=now))
    argv = ["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS, "--ca-secret", "my-ca",
            "--webhook-configurations", "", "--log-level", "error"]
    assert main(argv) == 0
    put_user_ca(kubeapi, make_ca(common_name="user CA 2", now=now))
    deployment(kubeapi, "late", "ns0")
    assert main(argv) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("NOT converged: ")
    assert "1 certificates wait: Secret ns0/late-tls: certificate issue waits: the new CA " in last
    assert "stopped" not in last


@pytest.mark.parametrize("back_after", [timedelta(minutes=2), timedelta(minutes=9)],
                         ids=["before-the-new-ca-signed", "after-leaves-moved"])
def test_switching_back_to_the_old_user_ca_mid_replacement_converges_on_it_without_breaking_trust(
    kubeapi: Emulator, back_after: timedelta
) -> None:
    small_cluster(kubeapi, namespaces=2, per_namespace=1)
    old, new = make_ca(common_name="user CA 1", now=START), make_ca(common_name="user CA 2", now=START)
    put_user_ca(kubeapi, old)
    clock = Clock()
    rec = reconciler(kubeapi, clock, user_ca_secret="my-ca")
    assert rec.run_pass().converged
    put_user_ca(kubeapi, new)
    switched_back_at = clock.now + back_after
    for _ in range(40):
        if clock.now == switched_back_at:
            put_user_ca(kubeapi, old)
        report = rec.run_pass()
        assert not report.aborted, report
        assert_every_leaf_verifies_against_every_bundle_in_use(kubeapi, clock.now)
        if clock.now > switched_back_at and report.converged and ca_fingerprints(kubeapi) == {fingerprint(old.cert)}:
            break
        clock.advance(PASS_EVERY)
    assert ca_fingerprints(kubeapi) == {fingerprint(old.cert)}
    assert set(issuers(kubeapi, old, new).values()) == {fingerprint(old.cert)}
    assert clock.now - switched_back_at <= timedelta(minutes=30)


def test_the_loop_starts_rotating_a_replaced_user_ca_in_at_once_not_at_the_resync(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    old, new = make_ca(common_name="user CA 1", now=START), make_ca(common_name="user CA 2", now=START)
    put_user_ca(kubeapi, old)
    with running_loop(kubeapi, watch_timeout_seconds=30, user_ca_secret="my-ca"):  # resync an hour away
        wait_for(lambda: ca_fingerprints(kubeapi) == {fingerprint(old.cert)})
        wait_for(lambda: kubeapi.open_watches("secrets") >= 3)  # ours by label (leaves, the others), the user's by name
        put_user_ca(kubeapi, new)
        wait_for(lambda: ca_fingerprints(kubeapi) == {fingerprint(old.cert), fingerprint(new.cert)})
