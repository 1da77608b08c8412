"""Client certificates over their life (docs/mtls.md): each CA set rotates while the other stays fixed and
every caller can still log in to every server with real TLS 1.3 handshakes after every pass; force-renew
and expiry renew a client leaf; issuance, renewal and failure are counted and evented apart from the
serving certificates', and the client CA set's states are exported like the serving CA's.

Pods go through the real /mutate over HTTPS and are stored in the API emulator (tests/kubeapi); the
reconciler runs against it over HTTP; the kubelet (tests/support/kubelet.py) fills in what each container
sees, and the handshakes use exactly those files.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace
from tests.reconcile.test_mtls_chain import (
    CLIENT,
    OPTED_IN,
    client_ca_states,
    client_context,
    handshake,
    mounted,
    run,
    server_context,
)
from tests.support.server import running_server
from tests.support.workloads import Obj, Shape
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.names import CERT_MOUNT_PATH, CLIENT_MOUNT_PATH, TRUST_MOUNT_PATH
from tls_injector.pki import load_certificates, verify_client
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

NS = "shop"  # tests.reconcile.test_mtls_chain.run creates its workloads there
SETTLE = timedelta(seconds=1)  # the trust state machine's wait, short so the real clock the handshakes use fits


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with running_server(tmp_path_factory.mktemp("srv"), mutate=make_mutate_handler(InjectionOptions())) as server, \
            server.client() as client:
        yield client


def _reconciler(emu: Emulator, clock: Clock, registry: CollectorRegistry | None = None) -> Reconciler:
    settings = ReconcileSettings(namespace=OWN_NS, ca=CaPolicy(settle=SETTLE))
    return Reconciler(KubeApi(emu.api_client()), settings, clock=clock,
                      metrics=ReconcileMetrics(registry) if registry is not None else None)


def _every_caller_logs_in_to_every_server(emu: Emulator, servers: list[Obj], callers: list[Obj],
                                          root: Path) -> list[str]:
    """Each caller's mounted client certificate against each server requiring client certificates verified
    with its mounted client-ca-bundle.crt; the caller verifies the server with its mounted ca.crt. Returns
    the SPIFFE IDs the servers saw."""
    seen = []
    for s, server_pod in enumerate(servers):
        sees = mounted(emu, server_pod, root / f"server-{s}")
        server = server_context(sees.path(f"{CERT_MOUNT_PATH}/tls.crt"), sees.path(f"{CERT_MOUNT_PATH}/tls.key"),
                                client_cas=sees.text(f"{TRUST_MOUNT_PATH}/client-ca-bundle.crt"))
        for c, caller_pod in enumerate(callers):
            has = mounted(emu, caller_pod, root / f"caller-{s}-{c}")
            client = client_context(has.path(f"{CLIENT_MOUNT_PATH}/tls.crt"), has.path(f"{CLIENT_MOUNT_PATH}/tls.key"),
                                    server_cas=has.text(f"{CLIENT_MOUNT_PATH}/ca.crt"))
            name = server_pod["metadata"]["labels"]["app"]
            outcome = handshake(server, client, server_name=f"{name}.{NS}.svc")
            assert outcome.accepted, (server_pod["metadata"]["labels"], caller_pod["metadata"]["labels"], outcome)
            assert outcome.version == "TLSv1.3"
            seen.append(outcome.server)
    return seen


@pytest.mark.parametrize(("rotated", "fixed"), [("tls-injector-client-ca", "tls-injector-ca"),
                                                ("tls-injector-ca", "tls-injector-client-ca")],
                         ids=["client CA rotates", "serving CA rotates"])
def test_one_ca_rotates_while_the_other_stays_and_every_caller_logs_in_to_every_server_at_every_pass(
        kubeapi: Emulator, webhook: httpx.Client, tmp_path: Path, rotated: str, fixed: str) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    clock = Clock(datetime.now(UTC))  # OpenSSL checks validity against the real clock
    servers = [run(kubeapi, webhook, Shape("Deployment", name, OPTED_IN)) for name in ("api", "db")]
    callers = [run(kubeapi, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}), service_account=name)
               for name in ("caller", "batch")]
    assert _reconciler(kubeapi, clock).run_pass().converged
    _every_caller_logs_in_to_every_server(kubeapi, servers, callers, tmp_path / "start")
    (old,) = client_ca_states(kubeapi, rotated)
    still = client_ca_states(kubeapi, fixed)
    api = KubeApi(kubeapi.api_client())
    ca = api.get(SECRETS, rotated, namespace=OWN_NS)
    ca["metadata"]["annotations"] = {"tls-injector.io/force-replace": "1"}
    api.replace(SECRETS, ca)
    history = [client_ca_states(kubeapi, rotated)]
    for step in range(20):
        clock.advance(2 * SETTLE)
        report = _reconciler(kubeapi, clock).run_pass()
        assert report.converged, report
        assert client_ca_states(kubeapi, fixed) == still, "the other CA set does not move"
        seen = _every_caller_logs_in_to_every_server(kubeapi, servers, callers, tmp_path / f"pass-{step}")
        assert sorted(set(seen)) == [f"accepted ['spiffe://cluster.local/ns/{NS}/sa/{sa}']"
                                     for sa in ("batch", "caller")]
        if history[-1] != client_ca_states(kubeapi, rotated):
            history.append(client_ca_states(kubeapi, rotated))
        if report.write_count == 0 and old not in client_ca_states(kubeapi, rotated):
            break
    else:
        raise AssertionError(f"the rotation did not finish: {history}")
    assert [h.get(old, "removed") for h in history] == [
        "trusted-used", "trusted-used", "trusted-used", "phase-out", "zombie", "removed"]


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def _events(emu: Emulator, reason: str) -> list[str]:
    """The messages of the Events of `reason`, oldest first (the tests' clock moves between passes)."""
    found = sorted(emu.objects("events", NS), key=lambda e: e["lastTimestamp"])
    return [e["message"] for e in found if e["reason"] == reason]


def _one_caller(emu: Emulator) -> None:
    """The injector's namespace, and one workload in NS asking for a client certificate."""
    namespace(emu, OWN_NS)
    namespace(emu, NS)
    deployment(emu, "caller", NS, annotations={CLIENT: "true"})


def test_force_renew_and_expiry_renew_a_client_leaf_counted_and_evented_as_a_client_certificate(
        kubeapi: Emulator) -> None:
    _one_caller(kubeapi)
    clock = Clock()
    registry = CollectorRegistry()
    reconciler = _reconciler(kubeapi, clock, registry)
    assert reconciler.run_pass().converged
    assert _sample(registry, "tls_injector_rotations_total", kind="client-leaf", reason="missing") == 1
    assert _sample(registry, "tls_injector_rotations_total", kind="leaf", reason="missing") == 1  # caller-tls
    # One Event for the namespace's pass, naming each certificate as what it is (events.issued_message).
    [issued] = _events(kubeapi, "CertificatesIssued")
    assert issued.startswith("2 certificates issued or renewed: "), issued
    assert sorted(issued.partition(": ")[2].split("; ")) == [
        "Secret caller-client-tls: client certificate issued (missing)",
        "Secret caller-tls: certificate issued (missing)"]
    # The client CA set's states, like the serving CA's, and the client leaves' expiry, apart from the serving.
    (client_fp,) = client_ca_states(kubeapi)
    states = {s.labels["state"] for m in registry.collect()
              if m.name == "tls_injector_client_ca_expiry_timestamp_seconds" for s in m.samples}
    assert states == {"trusted-used"}
    first = load_certificates(data(kubeapi.get("secrets", "caller-client-tls", NS))["tls.crt"])[0]
    assert _sample(registry, "tls_injector_client_certificates_earliest_expiry_timestamp_seconds") == \
        first.not_valid_after_utc.timestamp()
    assert _sample(registry, "tls_injector_client_certificates") == 1
    assert _sample(registry, "tls_injector_certificates") == 1  # the serving one, counted on its own
    assert reconciler.status is not None  # the status API and page: each CA set with its role
    assert {(ca.ca_set, ca.role, ca.state) for ca in reconciler.status.cas} == {
        ("tls-injector-ca", "serving", "trusted-used"), ("tls-injector-client-ca", "client", "trusted-used")}
    serving = data(kubeapi.get("secrets", "caller-tls", NS))["tls.crt"]

    api = KubeApi(kubeapi.api_client())
    secret = api.get(SECRETS, "caller-client-tls", namespace=NS)
    secret["metadata"].setdefault("annotations", {})["tls-injector.io/force-renew"] = "now"
    api.replace(SECRETS, secret)
    clock.advance(timedelta(minutes=1))
    report = reconciler.run_pass()
    assert report.reasons["renewed:force-renew"] == 1, report
    forced = kubeapi.get("secrets", "caller-client-tls", NS)
    assert "tls-injector.io/force-renew" not in (forced["metadata"].get("annotations") or {})
    second = load_certificates(data(forced)["tls.crt"])[0]
    assert second.serial_number != first.serial_number
    assert data(kubeapi.get("secrets", "caller-tls", NS))["tls.crt"] == serving, "the serving leaf is not touched"
    assert _sample(registry, "tls_injector_rotations_total", kind="client-leaf", reason="force-renew") == 1
    assert _events(kubeapi, "CertificatesIssued")[1:] == [
        "1 certificate issued or renewed: Secret caller-client-tls: client certificate renewed (force-renew)"]

    # 90-day leaves are renewed 35 days before they end: 56 days on, both are due, each counted as its kind.
    clock.advance(timedelta(days=56))
    report = reconciler.run_pass()
    assert report.converged, report
    third = load_certificates(data(kubeapi.get("secrets", "caller-client-tls", NS))["tls.crt"])
    assert third[0].not_valid_after_utc > clock.now + timedelta(days=80)
    bundle = kubeapi.get("configmaps", "tls-injector-trust-bundle", NS)["data"]["client-ca-bundle.crt"]
    verify_client(third[0], third[1:], trusted=load_certificates(bundle.encode()), now=clock.now)
    assert _sample(registry, "tls_injector_rotations_total", kind="client-leaf", reason="expiring") == 1
    assert _sample(registry, "tls_injector_rotations_total", kind="leaf", reason="expiring") == 1
    assert _sample(registry, "tls_injector_client_certificates_earliest_expiry_timestamp_seconds") == \
        third[0].not_valid_after_utc.timestamp()
    assert client_ca_states(kubeapi) == {client_fp: "trusted-used"}


def test_a_client_secret_that_cannot_be_written_is_counted_and_evented_as_a_client_failure(
        kubeapi: Emulator) -> None:
    _one_caller(kubeapi)
    registry = CollectorRegistry()
    kubeapi.fail_next("create", "secrets", "caller-client-tls", count=5, code=500)
    report = _reconciler(kubeapi, Clock(), registry).run_pass()
    assert not report.converged
    assert any("caller-client-tls" in failed for failed in report.failed), report
    assert _sample(registry, "tls_injector_rotation_failures_total", reason="client-secret") == 1
    assert _sample(registry, "tls_injector_rotation_failures_total", reason="secret") is None  # caller-tls was written
    [message] = _events(kubeapi, "ClientCertificateFailed")
    assert message == "create: injected fault for create secrets"  # the API's answer, as the log has it


def test_no_client_ca_series_while_no_workload_asks(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "api", NS)
    registry = CollectorRegistry()
    assert _reconciler(kubeapi, Clock(), registry).run_pass().converged
    assert not [s for m in registry.collect() if m.name == "tls_injector_client_ca_expiry_timestamp_seconds"
                for s in m.samples]
    assert _sample(registry, "tls_injector_client_certificates") == 0
    assert [s for m in registry.collect() if m.name == "tls_injector_ca_expiry_timestamp_seconds" for s in m.samples]
