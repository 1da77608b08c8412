"""Issue 39, point 4, with the real JDK: the keystore and truststore the reconciler writes into a workload's
Secret are listed by `keytool -list -storetype PKCS12`, serve a Java TLS server whose handshake a
Python/OpenSSL client verifies with the Secret's ca.crt, and let a Java client verify a Python/OpenSSL
server presenting the Secret's tls.crt. JDK tools come from tools/dev.py (Debian's default-jdk-headless):
missing, these tests fail, they never skip."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler

NS = "team-a"
HOST = f"billing.{NS}.svc.cluster.local"
SOURCE = Path(__file__).with_name("TlsPeer.java")
TIMEOUT = 60  # a JVM's start on a busy 2-core machine takes seconds; whole-command budget, never per read


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not installed: `python3.11 tools/dev.py test` installs the JDK (default-jdk-headless)"
    return found


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TlsPeer.class, compiled once."""
    out = tmp_path_factory.mktemp("jvm")
    subprocess.run([_tool("javac"), "-d", str(out), str(SOURCE)], check=True, timeout=TIMEOUT * 2)
    return out


def _secret(kubeapi: Emulator, annotations: dict[str, str], *, fresh: bool = True) -> dict[str, bytes]:
    if fresh:
        namespace(kubeapi, OWN_NS)
        namespace(kubeapi, NS)
    deployment(kubeapi, "billing", NS, annotations={"tls-injector.io/keystore": "pkcs12", **annotations})
    assert reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass().converged  # real clients check the time
    return data(kubeapi.get("secrets", "billing-tls", NS))


def _files(directory: Path, secret: dict[str, bytes]) -> None:
    for key, value in secret.items():
        (directory / key).write_bytes(value)


def _keytool_list(path: Path, password: bytes) -> str:
    done = subprocess.run([_tool("keytool"), "-list", "-v", "-storetype", "PKCS12", "-keystore", str(path),
                           "-storepass", password.decode()],
                          check=False, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_keytool_lists_the_keystore_as_one_private_key_entry_with_its_chain_and_the_truststore_as_the_cas(
        kubeapi: Emulator, tmp_path: Path) -> None:
    secret = _secret(kubeapi, {})
    _files(tmp_path, secret)
    password = secret["keystore.password"]
    listed = _keytool_list(tmp_path / "keystore.p12", password)
    assert "Keystore type: PKCS12" in listed
    assert "Your keystore contains 1 entry" in listed
    assert "Alias name: tls" in listed
    assert "Entry type: PrivateKeyEntry" in listed
    assert f"DNSName: {HOST}" in listed
    trusted = _keytool_list(tmp_path / "truststore.p12", password)
    assert "Entry type: trustedCertEntry" in trusted
    assert "PrivateKeyEntry" not in trusted
    wrong = subprocess.run([_tool("keytool"), "-list", "-storetype", "PKCS12", "-keystore",
                            str(tmp_path / "keystore.p12"), "-storepass", "not-the-password"],
                           check=False, capture_output=True, text=True, timeout=TIMEOUT)
    assert wrong.returncode != 0  # the MAC is checked: the password matters


def test_a_java_server_with_the_keystore_is_verified_by_an_openssl_client_with_ca_crt(
        kubeapi: Emulator, tmp_path: Path, peer: Path) -> None:
    secret = _secret(kubeapi, {})
    _files(tmp_path, secret)
    port_file = tmp_path / "port"
    with (tmp_path / "err").open("wb") as err:
        server = subprocess.Popen([_tool("java"), "-cp", str(peer), "TlsPeer", "server", str(tmp_path / "keystore.p12"),
                                   secret["keystore.password"].decode(), str(port_file)],
                                  stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not port_file.exists() or not port_file.read_text():
            assert server.poll() is None, (tmp_path / "err").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        context = ssl.create_default_context(cadata=secret["ca.crt"].decode())
        with socket.create_connection(("127.0.0.1", int(port_file.read_text())), timeout=TIMEOUT) as raw, \
                context.wrap_socket(raw, server_hostname=HOST) as tls:
            assert tls.recv(64) == b"hello from java\n"
            assert tls.version() == "TLSv1.3"
    finally:
        server.wait(timeout=TIMEOUT)
    assert server.returncode == 0


@pytest.mark.parametrize("hostname", [HOST, f"other.{NS}.svc.cluster.local"])
def test_a_java_client_with_the_truststore_verifies_an_openssl_server_and_refuses_a_name_not_in_it(
        kubeapi: Emulator, tmp_path: Path, peer: Path, hostname: str) -> None:
    secret = _secret(kubeapi, {})
    _files(tmp_path, secret)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)
        thread = threading.Thread(target=_serve_once, args=(listener, context), daemon=True)
        thread.start()
        done = subprocess.run([_tool("java"), "-cp", str(peer), "TlsPeer", "client", str(tmp_path / "truststore.p12"),
                               secret["keystore.password"].decode(), str(listener.getsockname()[1]), hostname],
                              check=False, capture_output=True, text=True, timeout=TIMEOUT)
        thread.join(TIMEOUT)
    if hostname == HOST:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "hello from python"
    else:
        assert done.returncode != 0
        assert "No subject alternative DNS name matching" in done.stderr


def test_a_password_from_the_workloads_own_secret_opens_both_stores_in_keytool(
        kubeapi: Emulator, tmp_path: Path) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": "billing-keystore-password", "namespace": NS},
                 "data": {"keystore.password": base64.b64encode(b"Correct-Horse-9").decode()}})
    secret = _secret(kubeapi, {"tls-injector.io/keystore-password-secret": "billing-keystore-password"}, fresh=False)
    _files(tmp_path, secret)
    assert "PrivateKeyEntry" in _keytool_list(tmp_path / "keystore.p12", b"Correct-Horse-9")
    assert "trustedCertEntry" in _keytool_list(tmp_path / "truststore.p12", b"Correct-Horse-9")


def _serve_once(listener: socket.socket, context: ssl.SSLContext) -> None:
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    try:
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"hello from python\n")
            tls.recv(1)
    except (OSError, ssl.SSLError):
        return
