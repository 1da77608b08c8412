"""Issue 39, point 4: a JVM keystore in the workload's Secret (tls-injector.io/keystore: pkcs12). The
keystore (key + tls.crt's chain) and truststore (ca.crt's CAs) follow the certificate: a re-issue rewrites
them, a converged pass writes nothing (PKCS#12 bytes are random-salted, so contents are compared). The
password is generated and kept beside them, or read from a Secret the workload names, which is refused
when it is not an Opaque Secret of the tenant's own holding keystore.password (docs/security.md)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector.pki import fingerprint, load_certificates, truststore_fingerprints
from tls_injector.reconcile.core.keystores import password_problem
from tls_injector.reconcile.loop.runner import summary

NS = "team-a"
KEYSTORE, PASSWORD_SECRET = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
ASK = {KEYSTORE: "pkcs12"}


def _put(emu: Emulator, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    emu.store.update(emu.resource(f"{obj['kind'].lower()}s"), meta["namespace"], meta["name"], obj)


def _opened(stored: dict[str, bytes], password: bytes) -> tuple[list[str], list[str]]:
    """(fingerprints of the keystore's chain, of tls.crt's) after checking the key is tls.key's."""
    store = pkcs12.load_pkcs12(stored["keystore.p12"], password)
    assert store.key is not None
    assert store.cert is not None
    assert store.cert.friendly_name == b"tls"
    chain = load_certificates(stored["tls.crt"])
    assert store.key.public_key() == chain[0].public_key()
    return ([fingerprint(c) for c in (store.cert.certificate, *(a.certificate for a in store.additional_certs))],
            [fingerprint(c) for c in chain])


def _password_secret(emu: Emulator, name: str, value: bytes | None = b"s3cret-pass", *, type_: str = "Opaque",
                     key: str = "keystore.password", labels: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "type": type_,
                            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
                            "data": {} if value is None else {key: base64.b64encode(value).decode()}}
    return emu.add(body)


def test_a_keystore_is_written_beside_the_pem_files_and_a_converged_pass_writes_nothing(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "billing", NS, annotations=ASK)
    deployment(kubeapi, "plain", NS)
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    stored = data(kubeapi.get("secrets", "billing-tls", NS))
    password = stored["keystore.password"]
    assert password_problem(password) == ""
    assert len(password) == 32
    held, chain = _opened(stored, password)
    assert held == chain
    cas = {fingerprint(c) for c in load_certificates(stored["ca.crt"])}
    assert truststore_fingerprints(stored["truststore.p12"], password=password) == cas != set()
    assert set(data(kubeapi.get("secrets", "plain-tls", NS))) == {"tls.crt", "tls.key", "ca.crt"}
    clock.advance(timedelta(minutes=1))
    assert reconciler(kubeapi, clock).run_pass().write_count == 0


def test_a_reissue_rewrites_the_keystore_with_the_new_key_and_keeps_the_password(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "billing", NS, annotations=ASK)
    clock = Clock()
    reconciler(kubeapi, clock).run_pass()
    before = data(kubeapi.get("secrets", "billing-tls", NS))
    secret = kubeapi.get("secrets", "billing-tls", NS)
    assert secret is not None
    secret["metadata"]["annotations"]["tls-injector.io/force-renew"] = "now"
    _put(kubeapi, secret)
    assert reconciler(kubeapi, clock).run_pass().write_count == 1
    after = data(kubeapi.get("secrets", "billing-tls", NS))
    assert after["tls.key"] != before["tls.key"]
    assert after["keystore.password"] == before["keystore.password"]
    held, chain = _opened(after, after["keystore.password"])
    assert held == chain
    assert held != _opened(before, before["keystore.password"])[0]


def test_the_password_comes_from_the_named_secret_never_copied_and_a_new_one_rewrites_the_keystore(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    _password_secret(kubeapi, "billing-keystore-password")
    deployment(kubeapi, "billing", NS, annotations={**ASK, PASSWORD_SECRET: "billing-keystore-password"})
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    stored = data(kubeapi.get("secrets", "billing-tls", NS))
    assert "keystore.password" not in stored
    assert all(b"s3cret-pass" not in value for value in stored.values())
    _opened(stored, b"s3cret-pass")
    assert truststore_fingerprints(stored["truststore.p12"], password=b"s3cret-pass")
    clock.advance(timedelta(minutes=1))
    assert reconciler(kubeapi, clock).run_pass().write_count == 0
    changed = kubeapi.get("secrets", "billing-keystore-password", NS)
    assert changed is not None
    changed["data"]["keystore.password"] = base64.b64encode(b"n3w-secret").decode()
    _put(kubeapi, changed)
    assert reconciler(kubeapi, clock).run_pass().write_count == 1
    _opened(data(kubeapi.get("secrets", "billing-tls", NS)), b"n3w-secret")


@pytest.mark.parametrize(("setup", "why"), [
    (lambda emu: None, "does not exist"),
    (lambda emu: _password_secret(emu, "pw", key="password"), "has no key keystore.password"),
    (lambda emu: _password_secret(emu, "pw", type_="kubernetes.io/basic-auth"), "of type kubernetes.io/basic-auth"),
    (lambda emu: _password_secret(emu, "pw", labels={"app.kubernetes.io/managed-by": "tls-injector"}),
     "tls-injector's own"),
    (lambda emu: _password_secret(emu, "pw", b"short"), "6 to 128 characters"),
    (lambda emu: _password_secret(emu, "pw", b"with-a-newline\n"), "printable ASCII"),
])
def test_a_password_secret_that_may_not_be_used_is_refused_with_why_and_the_rest_goes_on(
        kubeapi: Emulator, setup: Any, why: str) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    setup(kubeapi)
    deployment(kubeapi, "billing", NS, annotations={**ASK, PASSWORD_SECRET: "pw"})
    deployment(kubeapi, "other", NS, annotations=ASK)
    report = reconciler(kubeapi, Clock()).run_pass()
    assert not report.converged
    [message] = report.keystores_refused
    assert why in message
    assert "team-a/billing-tls" in message
    assert "Deployment/billing" in message
    refused = data(kubeapi.get("secrets", "billing-tls", NS))
    assert set(refused) == {"tls.crt", "tls.key", "ca.crt"}  # the certificate is issued all the same
    assert "keystore.p12" in data(kubeapi.get("secrets", "other-tls", NS))
    assert summary(report).startswith("NOT converged: 4 writes (4 create); 1 keystore refused")
    events = [e for e in kubeapi.objects("events", NS) if e.get("reason") == "KeystoreRefused"]
    assert events
    assert events[0]["involvedObject"]["name"] == "billing"


def test_another_workloads_certificate_secret_is_never_read_as_a_password(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "victim", NS)
    deployment(kubeapi, "billing", NS, annotations={**ASK, PASSWORD_SECRET: "victim-tls"})
    clock = Clock()
    reconciler(kubeapi, clock).run_pass()
    report = reconciler(kubeapi, clock).run_pass()  # victim-tls exists now, and is ours
    assert any("tls-injector's own" in m for m in report.keystores_refused)
    assert "keystore.p12" not in data(kubeapi.get("secrets", "billing-tls", NS))


def test_the_injectors_own_namespace_is_never_read_for_a_password(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    deployment(kubeapi, "tool", OWN_NS, annotations={**ASK, PASSWORD_SECRET: "tls-injector-ca"})
    report = reconciler(kubeapi, Clock()).run_pass()
    assert any("own namespace" in m for m in report.keystores_refused)


def test_the_keystore_keys_go_when_nobody_asks_any_more(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    workload = deployment(kubeapi, "billing", NS, annotations=ASK)
    clock = Clock()
    reconciler(kubeapi, clock).run_pass()
    assert "keystore.p12" in data(kubeapi.get("secrets", "billing-tls", NS))
    workload["spec"]["template"]["metadata"]["annotations"] = {}
    _put(kubeapi, workload)
    reconciler(kubeapi, clock).run_pass()
    assert set(data(kubeapi.get("secrets", "billing-tls", NS))) == {"tls.crt", "tls.key", "ca.crt"}
