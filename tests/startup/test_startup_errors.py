"""Startup problems end the real process with exit status 2 and one line naming the file: no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tls_injector.pki import issue_leaf, make_ca

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str, cwd: Path) -> tuple[int, list[str]]:
    """Exit status and the lines on stderr that are not the JSON log (the one-line message, if any)."""
    env = {**os.environ, "KUBECONFIG": str(cwd / "no-kubeconfig")}
    done = subprocess.run([sys.executable, "-m", "tls_injector", *argv], cwd=ROOT, env=env, capture_output=True,
                          timeout=30, check=False)
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr
    return done.returncode, [line for line in stderr.splitlines() if not line.startswith("{")]


def write_pair(directory: Path, *, start: datetime, key_pem: bytes | None = None) -> tuple[Path, Path]:
    now = start
    ca = make_ca(common_name="startup CA", now=now, validity=timedelta(days=60))
    leaf = issue_leaf(issuer=ca, dns_names=["localhost"], now=now, validity=timedelta(days=30))
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(key_pem or leaf.key_pem)
    return cert, key


def pkcs8(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


SERVE_CASES = {
    "missing certificate": ("cannot read: No such file or directory", "tls.crt"),
    "key of another certificate": ("does not belong to the certificate", "tls.key"),
    "encrypted key": ("the private key is encrypted", "tls.key"),
    "RSA-1024 key": ("RSA key of 1024 bits is too weak", "tls.key"),
    "expired certificate": ("the certificate expired on", "tls.crt"),
}


@pytest.mark.parametrize("case", sorted(SERVE_CASES))
def test_serve_refuses_an_unusable_serving_pair_in_one_line(case: str, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    start = now - timedelta(days=45) if case == "expired certificate" else now - timedelta(hours=1)
    key_pem = {
        "key of another certificate": lambda: pkcs8(ec.generate_private_key(ec.SECP256R1())),
        "encrypted key": lambda: pkcs8(ec.generate_private_key(ec.SECP256R1()), b"secret"),
        "RSA-1024 key": lambda: pkcs8(rsa.generate_private_key(public_exponent=65537, key_size=1024)),
    }.get(case, lambda: None)()
    cert, key = write_pair(tmp_path, start=start, key_pem=key_pem)
    if case == "missing certificate":
        cert.unlink()
    code, lines = run("serve", "--port", "0", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
                      cwd=tmp_path)
    reason, file_name = SERVE_CASES[case]
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"tls-injector serve: {tmp_path / file_name}: ")
    assert reason in lines[0]


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("reconcile", "--once")])
@pytest.mark.parametrize("kubeconfig", ["missing", "malformed"])
def test_an_unusable_kubeconfig_is_one_line_naming_it(command: tuple[str, ...], kubeconfig: str,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    if kubeconfig == "malformed":
        path.write_text("apiVersion: v1\nclusters: [\n")
    code, lines = run(*command, "--kubeconfig", str(path), cwd=tmp_path)
    assert code == 2
    assert len(lines) == 1, lines
    expected = f"tls-injector {command[0]}: cannot load the cluster configuration (kubeconfig {path}): "
    assert lines[0].startswith(expected)


def test_a_symlinked_self_signed_dir_is_refused_in_one_line(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "certs").symlink_to(elsewhere)
    code, lines = run("serve", "--port", "0", "--self-signed-dir", str(tmp_path / "certs"), cwd=tmp_path)
    assert code == 2
    assert lines == [f"tls-injector serve: {tmp_path / 'certs'}: --self-signed-dir is a symbolic link; give a real "
                     "directory"]
    assert list(elsewhere.iterdir()) == []
