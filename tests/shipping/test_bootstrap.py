"""`tls-injector bootstrap` against the API emulator, through the official client, as the Job runs it."""

from __future__ import annotations

import base64
import socket
import ssl
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.kubeapi import Emulator
from tests.kubeapi.resources import lookup_qualified
from tests.shipping.support import ROOT, Obj, only, render
from tests.support.server import running_server
from tls_injector.cli import main
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.kube import KubeApi
from tls_injector.pki import (
    SETTLE,
    UntrustedChain,
    issue_leaf,
    load_cert_key,
    load_certificates,
    make_ca,
    verify_server,
)
from tls_injector.reconcile.loop.bootstrap import bootstrap as bootstrap_once
from tls_injector.reconcile.loop.bootstrap import bootstrap_settings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

NS = "tls-injector"
SERVICE = "tls-injector"
SANS = [SERVICE, f"{SERVICE}.{NS}", f"{SERVICE}.{NS}.svc", f"{SERVICE}.{NS}.svc.cluster.local"]
DIALED = f"{SERVICE}.{NS}.svc"  # the name the apiserver uses for a clientConfig.service reference
PLURALS = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
           "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}
SERVING = "tls-injector-webhook-tls"
CA = WebhookSettings().ca.secret_name


def job_args() -> list[str]:
    """The Job's own command line, so the test runs exactly what the cluster runs."""
    job = only(render(ROOT / "certs-bootstrap"), "Job")
    args: list[str] = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


INSTALLED = "examples/sidecar-tls/overlay"


def install(emu: Emulator, rendering: str = INSTALLED) -> None:
    """What `kubectl apply -k` leaves before the Job runs: the namespace and both webhook configurations
    (the SeiNode example's validating one has two entries: every entry must get the bundle)."""
    objects = render(ROOT / rendering)
    emu.add(only(objects, "Namespace"))
    for kind in PLURALS:
        emu.add(only(objects, kind))


def bootstrap(emu: Emulator) -> int:
    return main([*job_args(), f"--server={emu.url}"])


def secret_data(emu: Emulator, name: str) -> dict[str, bytes]:
    secret = emu.get("secrets", name, NS)
    assert secret is not None, f"Secret {name} missing"
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def put_secret_data(emu: Emulator, name: str, key: str, value: bytes) -> None:
    secret: Obj = emu.get("secrets", name, NS) or {}
    secret["data"][key] = base64.b64encode(value).decode()
    emu.store.update(lookup_qualified("secrets"), NS, name, secret)


def entries(emu: Emulator) -> list[tuple[str, Obj]]:
    return [(kind, hook) for kind, plural in PLURALS.items()
            for hook in (emu.get(plural, "tls-injector") or {}).get("webhooks", [])]


def ca_bundle(hook: Obj) -> bytes:
    return base64.b64decode(hook["clientConfig"].get("caBundle") or "")


def assert_every_entry_trusts(emu: Emulator, chain_pem: bytes, *, names: list[str] = SANS) -> None:
    """Each entry's caBundle verifies the chain, as a TLS client does, for every name given."""
    chain, now = load_certificates(chain_pem), datetime.now(UTC)
    found = entries(emu)
    shipped = [hook for kind in PLURALS for c in render(ROOT / INSTALLED) if c["kind"] == kind
               for hook in c["webhooks"]]
    assert len(found) == len(shipped) >= 4
    for kind, hook in found:
        trusted = load_certificates(ca_bundle(hook))
        assert trusted, f"{kind} {hook['name']} has no caBundle"
        for name in names:
            verify_server(chain[0], chain[1:], trusted=trusted, dns_name=name, now=now)


def test_the_first_run_creates_the_secrets_and_every_entry_of_both_configurations_trusts_the_cert(
    kubeapi: Emulator,
) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    serving = secret_data(kubeapi, SERVING)
    assert set(serving) == {"tls.crt", "tls.key", "ca.crt"}
    assert (kubeapi.get("secrets", SERVING, NS) or {})["type"] == "kubernetes.io/tls"
    load_cert_key(serving["tls.crt"], serving["tls.key"])  # the key is the leaf's own
    assert_every_entry_trusts(kubeapi, serving["tls.crt"])


def test_the_ca_private_key_never_leaves_its_own_secret(kubeapi: Emulator) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    serving = secret_data(kubeapi, SERVING)
    ca_keys = [v for k, v in secret_data(kubeapi, CA).items() if k.endswith(".key")]
    assert ca_keys
    for key in ca_keys:
        assert key not in serving.values()
    assert serving["tls.key"].count(b"PRIVATE KEY-----") == 2  # one BEGIN, one END: the leaf's key only


def test_a_second_run_writes_nothing(kubeapi: Emulator) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    kubeapi.reset_log()
    assert bootstrap(kubeapi) == 0
    assert kubeapi.writes() == []


def test_an_entry_that_lost_its_caBundle_gets_it_back_and_only_its_configuration_is_written(
    kubeapi: Emulator,
) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    config: Obj = kubeapi.get("validatingwebhookconfigurations", "tls-injector") or {}
    config["webhooks"][-1]["clientConfig"].pop("caBundle")
    kubeapi.store.update(lookup_qualified("validatingwebhookconfigurations.admissionregistration.k8s.io"),
                         None, "tls-injector", config)
    kubeapi.reset_log()
    assert bootstrap(kubeapi) == 0
    assert [(w.verb, w.resource) for w in kubeapi.writes()] == [
        ("update", "validatingwebhookconfigurations.admissionregistration.k8s.io")]
    assert_every_entry_trusts(kubeapi, secret_data(kubeapi, SERVING)["tls.crt"])


@pytest.mark.parametrize(
    "broken",
    ["foreign", "garbage", "wrong-names", "key-mismatch"],
)
def test_an_invalid_serving_certificate_is_replaced_under_the_same_ca(kubeapi: Emulator, broken: str) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    ca_before = secret_data(kubeapi, CA)
    now = datetime.now(UTC)
    other_ca = make_ca(common_name="someone else", now=now)
    bad = {
        "foreign": ("tls.crt", issue_leaf(issuer=other_ca, dns_names=SANS, now=now).cert_pem),
        "garbage": ("tls.crt", b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"),
        "wrong-names": ("tls.crt", issue_leaf(issuer=other_ca, dns_names=["elsewhere"], now=now).cert_pem),
        "key-mismatch": ("tls.key", issue_leaf(issuer=other_ca, dns_names=SANS, now=now).key_pem),
    }[broken]
    put_secret_data(kubeapi, SERVING, *bad)
    assert bootstrap(kubeapi) == 0
    serving = secret_data(kubeapi, SERVING)
    load_cert_key(serving["tls.crt"], serving["tls.key"])
    assert_every_entry_trusts(kubeapi, serving["tls.crt"])
    assert secret_data(kubeapi, CA) == ca_before, "a bad leaf is no reason to replace the CA"


def test_a_missing_webhook_configuration_fails_the_job_with_a_message_that_says_what_to_do(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str],
) -> None:
    objects = render(ROOT / "manifests/base")
    kubeapi.add(only(objects, "Namespace"))
    kubeapi.add(only(objects, "MutatingWebhookConfiguration"))
    assert bootstrap(kubeapi) == 1
    err = capsys.readouterr().err
    assert "tls-injector" in err
    assert "Traceback" not in err
    kubeapi.add(only(objects, "ValidatingWebhookConfiguration"))
    assert bootstrap(kubeapi) == 0


@pytest.mark.parametrize("code", [403, 503])
def test_an_api_error_fails_the_job_cleanly_and_the_next_run_recovers(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str], code: int,
) -> None:
    install(kubeapi)
    kubeapi.fail_next("create", "secrets", code=code, count=10)
    assert bootstrap(kubeapi) == 1
    captured = capsys.readouterr()
    assert "NOT converged" in captured.out
    assert "Traceback" not in captured.out + captured.err
    kubeapi.clear_faults()
    assert bootstrap(kubeapi) == 0


def test_a_concurrent_writer_costs_a_retry_never_an_overwrite(kubeapi: Emulator) -> None:
    install(kubeapi)
    kubeapi.conflict_on_first_write(verbs=("update",), touch=True)
    assert bootstrap(kubeapi) == 0
    assert_every_entry_trusts(kubeapi, secret_data(kubeapi, SERVING)["tls.crt"])
    for _, hook in entries(kubeapi):
        assert hook["clientConfig"]["service"]["name"] == SERVICE  # the rest of each entry is untouched


def test_a_new_ca_keeps_the_old_one_in_every_caBundle_while_pods_may_still_serve_the_old_certificate(
    kubeapi: Emulator,
) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    served_before = secret_data(kubeapi, SERVING)["tls.crt"]  # what the running pods have mounted
    kubeapi.store.delete(lookup_qualified("secrets"), NS, CA)  # lost: a new CA must be made
    assert bootstrap(kubeapi) == 0
    assert_every_entry_trusts(kubeapi, served_before, names=[DIALED])
    assert_every_entry_trusts(kubeapi, secret_data(kubeapi, SERVING)["tls.crt"], names=[DIALED])


def test_the_real_server_with_the_bootstrapped_secret_passes_the_apiservers_tls_handshake(
    kubeapi: Emulator, tmp_path: Path,
) -> None:
    install(kubeapi)
    assert bootstrap(kubeapi) == 0
    mounted = tmp_path / "serving"
    mounted.mkdir()
    for key, value in secret_data(kubeapi, SERVING).items():
        (mounted / key).write_bytes(value)
    _, hook = entries(kubeapi)[0]
    client = ssl.create_default_context(cadata=ca_bundle(hook).decode())
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    with running_server(tmp_path, cert_file=mounted / "tls.crt", key_file=mounted / "tls.key",
                        ca_file=mounted / "ca.crt") as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client.wrap_socket(raw, server_hostname=DIALED) as tls:
            tls.sendall(f"GET /readyz HTTP/1.1\r\nHost: {DIALED}\r\nConnection: close\r\n\r\n".encode())
            assert tls.recv(64).startswith(b"HTTP/1.1 200")
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_after_the_settle_time_the_old_ca_leaves_every_caBundle_and_runs_in_between_write_nothing(
    kubeapi: Emulator,
) -> None:
    install(kubeapi)
    api, settings = KubeApi(kubeapi.api_client()), bootstrap_settings(settings_for(_parser().parse_args(job_args())))
    assert settings is not None
    start = datetime.now(UTC)
    assert bootstrap_once(api, settings, now=start).ok
    old_leaf = secret_data(kubeapi, SERVING)["tls.crt"]
    kubeapi.store.delete(lookup_qualified("secrets"), NS, CA)
    assert bootstrap_once(api, settings, now=start).ok
    kubeapi.reset_log()
    assert bootstrap_once(api, settings, now=start + SETTLE / 2).ok
    assert kubeapi.writes() == [], "nothing to do while the old CA must stay"
    assert bootstrap_once(api, settings, now=start + SETTLE).ok
    bundles = [load_certificates(ca_bundle(hook)) for _, hook in entries(kubeapi)]
    assert {len(b) for b in bundles} == {1}
    for trusted in bundles:
        with pytest.raises(UntrustedChain):
            verify_server(load_certificates(old_leaf)[0], [], trusted=trusted, dns_name=DIALED, now=start)
