"""PKCS#12 keystores: modern profile, readable by OpenSSL 3 and by cryptography."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import pkcs12

from app.pki import CertKey, issue_leaf, make_intermediate, to_pkcs12
from tests.pki.conftest import NOW

PASSWORD = b"s3cret-keystore"


@pytest.fixture(scope="module")
def leaf(ca: CertKey) -> CertKey:
    return issue_leaf(issuer=make_intermediate(ca, domain="dc1", now=NOW), dns_names=["web", "web.shop"], now=NOW)


def test_the_keystore_holds_the_key_the_leaf_its_intermediate_and_the_trusted_root(ca: CertKey, leaf: CertKey) -> None:
    store = pkcs12.load_pkcs12(to_pkcs12(leaf, password=PASSWORD, name="web", trusted=[ca.cert]), PASSWORD)
    assert store.key is not None
    assert store.key.public_key() == leaf.key.public_key()
    assert store.cert is not None
    assert store.cert.certificate == leaf.cert
    assert store.cert.friendly_name == b"web"
    assert [c.certificate for c in store.additional_certs] == [leaf.chain[0], ca.cert]


def test_the_wrong_password_does_not_open_the_keystore(leaf: CertKey) -> None:
    with pytest.raises(ValueError, match="Invalid password"):
        pkcs12.load_pkcs12(to_pkcs12(leaf, password=PASSWORD), b"guess")


def test_an_empty_password_is_refused(leaf: CertKey) -> None:
    with pytest.raises(ValueError, match="non-empty password"):
        to_pkcs12(leaf, password=b"")


def test_openssl_reads_the_keystore_with_pbes2_aes_and_a_sha256_mac(leaf: CertKey, tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:  # no binary: the cryptography round trip above is the check that remains
        pkcs12.load_pkcs12(to_pkcs12(leaf, password=PASSWORD), PASSWORD)
        return
    path = tmp_path / "web.p12"
    path.write_bytes(to_pkcs12(leaf, password=PASSWORD))
    info = [openssl, "pkcs12", "-info", "-noout", "-in", str(path), "-passin"]
    ok = subprocess.run([*info, f"pass:{PASSWORD.decode()}"], capture_output=True, text=True, check=False, timeout=20)
    assert ok.returncode == 0, ok.stderr
    assert "MAC: sha256" in ok.stderr
    assert "PBES2, PBKDF2, AES-256-CBC" in ok.stderr
    bad = subprocess.run([*info, "pass:guess"], capture_output=True, text=True, check=False, timeout=20)
    assert bad.returncode != 0
