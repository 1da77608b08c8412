"""The same questions answered continuously: each reconcile pass checks what the webhook serves against the
live caBundle and counts pods missing the injection (metrics), and `serve` with the reconciler in-process
fails /readyz while the caBundle does not trust the certificate it serves."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx

from tests.doctor.cluster import SERVICE_DNS, install, pod_of, serving_files, workloads
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS
from tests.support.process import ROOT, free_port
from tests.support.server import running_server
from tls_injector.kube import KubeApi
from tls_injector.pki import issue_leaf, make_ca
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

TRUSTS = "tls_injector_cabundle_trusts_serving_cert"
CONFIGURATIONS = ("MutatingWebhookConfiguration/tls-injector", "ValidatingWebhookConfiguration/tls-injector")


def _foreign_files(directory: Path) -> tuple[Path, Path]:
    """A certificate for the Service's name from a CA no caBundle holds."""
    now = datetime.now(UTC)
    leaf = issue_leaf(issuer=make_ca(common_name="someone else's CA", now=now), dns_names=[SERVICE_DNS], now=now)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(leaf.cert_pem)
    (directory / "tls.key").write_bytes(leaf.key_pem)
    return directory / "tls.crt", directory / "tls.key"


def _pass(emu: Emulator, metrics: ReconcileMetrics, address: tuple[str, int]) -> None:
    settings = ReconcileSettings(namespace=OWN_NS, webhook=WebhookSettings(served_address=address))
    assert Reconciler(KubeApi(emu.api_client()), settings, metrics=metrics).run_pass().converged


def _trusts(metrics: ReconcileMetrics) -> list[float | None]:
    return [metrics.registry.get_sample_value(TRUSTS, {"configuration": c}) for c in CONFIGURATIONS]


def test_each_pass_says_whether_every_caBundle_trusts_what_the_webhook_serves(kubeapi: Emulator,
                                                                                tmp_path: Path) -> None:
    install(kubeapi)
    metrics = ReconcileMetrics()
    _pass(kubeapi, metrics, ("127.0.0.1", free_port()))  # nothing listens yet: unknown, so no sample at all
    assert metrics.serving_verdict is None
    assert _trusts(metrics) == [None, None]
    cert, key = serving_files(kubeapi, tmp_path / "ours")
    with running_server(tmp_path, cert_file=cert, key_file=key, ca_file=cert) as server:
        _pass(kubeapi, metrics, ("127.0.0.1", int(server.url.rpartition(":")[2])))
    assert metrics.serving_verdict is True
    assert _trusts(metrics) == [1.0, 1.0]
    cert, key = _foreign_files(tmp_path / "foreign")
    with running_server(tmp_path, cert_file=cert, key_file=key, ca_file=cert) as server:
        _pass(kubeapi, metrics, ("127.0.0.1", int(server.url.rpartition(":")[2])))
    assert metrics.serving_verdict is False
    assert _trusts(metrics) == [0.0, 0.0]


def test_each_pass_counts_the_opted_in_pods_that_missed_the_injection(kubeapi: Emulator) -> None:
    install(kubeapi)
    workloads(kubeapi)
    kubeapi.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "system", "namespace": "kube-system",
                                                                 "labels": {"tls-injector.io/inject": "true"}},
                 "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}})  # excluded by design
    metrics = ReconcileMetrics()
    settings = ReconcileSettings(namespace=OWN_NS)
    assert Reconciler(KubeApi(kubeapi.api_client()), settings, metrics=metrics).run_pass().converged
    assert metrics.registry.get_sample_value("tls_injector_pods_missing_injection") == 0
    for name, ns in (("web", "shop"), ("api", "plain")):
        kubeapi.add(pod_of(kubeapi, name, ns))  # created while the webhook was down
    assert Reconciler(KubeApi(kubeapi.api_client()), settings, metrics=metrics).run_pass().converged
    assert metrics.registry.get_sample_value("tls_injector_pods_missing_injection") == 2


@contextlib.contextmanager
def _serve(emu: Emulator, tmp_path: Path, cert: Path, key: Path) -> Iterator[httpx.Client]:
    """`tls-injector serve` with the reconciler in-process, against the emulator; a client that trusts
    anything (the test asks about readiness, not about TLS)."""
    port = free_port()
    argv = [sys.executable, "-m", "tls_injector", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", str(cert), "--tls-private-key-file", str(key), "--server", emu.url,
            "--namespace", OWN_NS, "--log-level", "warning"]
    with (tmp_path / "serve.stderr").open("wb") as stderr:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context, timeout=5) as client:
            yield client
    finally:
        process.terminate()
        process.wait(timeout=30)


def _eventually(client: httpx.Client, path: str, expected: str, *, seconds: float = 30) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(httpx.TransportError):
            response = client.get(path)
            if expected in response.text:
                return response
        assert time.monotonic() < deadline, f"{path} never showed {expected!r}"
        time.sleep(0.1)


def test_serve_is_not_ready_while_the_caBundle_does_not_trust_the_certificate_it_serves(
    kubeapi: Emulator, tmp_path: Path
) -> None:
    install(kubeapi)
    cert, key = _foreign_files(tmp_path / "foreign")
    with _serve(kubeapi, tmp_path, cert, key) as client:
        _eventually(client, "/metrics", f'{TRUSTS}{{configuration="{CONFIGURATIONS[0]}"}} 0.0')
        # the gauge is set a moment before the pass hands /readyz its verdict: wait for the verdict itself
        ready = _eventually(client, "/readyz", '"ca_bundle_trusts_serving_cert":false')
    assert ready.status_code == 503
    assert ready.json() == {"ready": False, "certificate_loaded": True, "shutting_down": False,
                            "ca_bundle_trusts_serving_cert": False}


def test_serve_is_ready_when_the_caBundle_trusts_the_certificate_it_serves(kubeapi: Emulator,
                                                                           tmp_path: Path) -> None:
    install(kubeapi)
    _pass(kubeapi, ReconcileMetrics(), ("127.0.0.1", free_port()))  # the bootstrap's work: Secret and caBundles
    cert, key = serving_files(kubeapi, tmp_path / "ours")
    with _serve(kubeapi, tmp_path, cert, key) as client:
        _eventually(client, "/metrics", f'{TRUSTS}{{configuration="{CONFIGURATIONS[1]}"}} 1.0')
        ready = _eventually(client, "/readyz", '"ca_bundle_trusts_serving_cert":true')
    assert ready.status_code == 200
    assert ready.json()["ca_bundle_trusts_serving_cert"] is True
