"""The server over real TLS on loopback: verified like a client would, hardened, reloading in place."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
import time
import warnings
from pathlib import Path

import httpx
import pytest

from tests.support.certs import swap_secret_volume, write_serving_pair
from tests.support.server import running_server


def served_certificate(url: str, ca_file: Path, *, server_hostname: str | None = None) -> bytes:
    """The DER certificate a fresh connection is served, after verifying it against `ca_file`."""
    host, port = url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((host, int(port)), timeout=5) as raw, context.wrap_socket(
        raw, server_hostname=server_hostname or host
    ) as tls:
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return certificate


def test_a_client_verifies_the_self_signed_certificate_against_the_printed_ca(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, server.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").status_code == 200


def test_a_client_trusting_another_ca_refuses_the_server(tmp_path: Path) -> None:
    other = write_serving_pair(tmp_path / "other", common_name="someone else's CA")
    with running_server(tmp_path) as server:
        context = ssl.create_default_context(cafile=str(other.ca_file))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(server.url + "/healthz", verify=context)


def test_a_client_checks_the_host_name_too(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        served_certificate(server.url, server.ca_file, server_hostname="web.example.com")


@pytest.mark.parametrize(
    ("version", "accepted"),
    [(ssl.TLSVersion.TLSv1_1, False), (ssl.TLSVersion.TLSv1_2, True), (ssl.TLSVersion.TLSv1_3, True)],
)
def test_only_tls_1_2_and_newer_are_accepted(tmp_path: Path, version: ssl.TLSVersion, accepted: bool) -> None:
    with running_server(tmp_path) as server:
        context = server.client_context()
        with warnings.catch_warnings():  # offering TLS 1.1 is deprecated, which is the point of the case
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = context.maximum_version = version
        if version < ssl.TLSVersion.TLSv1_2:
            context.set_ciphers("ALL:@SECLEVEL=0")  # let the client offer it, so the server is what refuses
        try:
            status = httpx.get(server.url + "/healthz", verify=context).status_code
        except httpx.ConnectError:
            status = None
        assert (status == 200) is accepted


def test_given_files_are_served_and_reported_in_the_expiry_metric(tmp_path: Path) -> None:
    files = write_serving_pair(tmp_path / "pair")
    with running_server(tmp_path, cert_file=files.cert_file, key_file=files.key_file,
                        ca_file=files.ca_file) as server:
        assert served_certificate(server.url, files.ca_file) == files.leaf.cert.public_bytes(_der())
        with server.client() as client:
            metrics = client.get("/metrics").text
    expiry = files.leaf.cert.not_valid_after_utc.timestamp()
    gauge = next(line for line in metrics.splitlines()
                 if line.startswith("tls_injector_serving_cert_expiry_timestamp_seconds "))
    assert float(gauge.split()[1]) == expiry


def test_a_swapped_secret_volume_is_served_to_new_connections_with_no_failed_request(tmp_path: Path) -> None:
    first = write_serving_pair(tmp_path / "first", common_name="first CA")
    second = write_serving_pair(tmp_path / "second", common_name="second CA")
    volume = tmp_path / "volume"
    swap_secret_volume(volume, tmp_path / "first")
    bundle = tmp_path / "bundle.crt"  # both CAs trusted, as during a rotation
    bundle.write_bytes(first.ca.cert_pem + second.ca.cert_pem)
    with running_server(tmp_path, cert_file=volume / "tls.crt", key_file=volume / "tls.key",
                        ca_file=bundle) as server:
        results = _requests_while(lambda: swap_secret_volume(volume, tmp_path / "second"), server.url, bundle)
        assert _wait_for_cert(server.url, bundle, second.leaf.cert.public_bytes(_der()))
        with server.client() as client:
            reloads = client.get("/metrics").text
    assert results["failed"] == 0, results
    assert results["ok"] > 0
    assert 'tls_injector_serving_cert_reloads_total{result="success"} 1.0' in reloads


def test_a_broken_new_pair_keeps_the_old_certificate_serving(tmp_path: Path) -> None:
    good = write_serving_pair(tmp_path / "good")
    other = write_serving_pair(tmp_path / "other")
    volume = tmp_path / "volume"
    swap_secret_volume(volume, tmp_path / "good")
    torn = tmp_path / "torn"  # a certificate whose key has not arrived yet
    torn.mkdir()
    shutil.copy(other.cert_file, torn / "tls.crt")
    shutil.copy(good.key_file, torn / "tls.key")
    with running_server(tmp_path, cert_file=volume / "tls.crt", key_file=volume / "tls.key",
                        ca_file=good.ca_file) as server:
        swap_secret_volume(volume, torn)
        # the failed reload counted (the event loop's next look: every 50 ms here; seconds on a loaded machine)
        deadline = time.monotonic() + 10
        with server.client() as client:
            while 'reloads_total{result="failure"} 1.0' not in (metrics := client.get("/metrics").text):
                assert time.monotonic() < deadline, metrics
                time.sleep(0.05)
        assert served_certificate(server.url, good.ca_file) == good.leaf.cert.public_bytes(_der())
    assert 'tls_injector_serving_cert_reloads_total{result="failure"} 1.0' in metrics
    assert 'tls_injector_serving_cert_reloads_total{result="success"} 0.0' in metrics


def _requests_while(action: object, url: str, ca_file: Path) -> dict[str, int]:
    """Send requests on kept-alive and fresh connections from a thread while `action` runs."""
    results = {"ok": 0, "failed": 0}
    stop = threading.Event()

    def load() -> None:
        context = ssl.create_default_context(cafile=str(ca_file))
        with httpx.Client(base_url=url, verify=context) as kept_alive:
            while not stop.is_set():
                for client in (kept_alive, None):
                    try:
                        response = (client.get("/healthz") if client else httpx.get(url + "/healthz", verify=context))
                        results["ok" if response.status_code == 200 else "failed"] += 1
                    except httpx.HTTPError:
                        results["failed"] += 1

    worker = threading.Thread(target=load)
    worker.start()
    time.sleep(0.2)
    action()  # type: ignore[operator]
    time.sleep(0.4)
    stop.set()
    worker.join()
    return results


def _wait_for_cert(url: str, ca_file: Path, expected: bytes) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if served_certificate(url, ca_file) == expected:
            return True
        time.sleep(0.05)
    return False


def _der() -> object:
    from cryptography.hazmat.primitives.serialization import Encoding

    return Encoding.DER


def test_alpn_settles_a_client_offering_http2_on_http_1_1(tmp_path: Path) -> None:
    """What Go's client (the apiserver's) offers by default: h2 first; the server picks HTTP/1.1."""
    with running_server(tmp_path) as server:
        context = server.client_context()
        context.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "http/1.1"
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert tls.recv(64).startswith(b"HTTP/1.1 200")
