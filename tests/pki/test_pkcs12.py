"""PKCS#12 keystores: modern profile, readable by OpenSSL 3 and by cryptography."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.pki.conftest import NOW
from tls_injector.pki import (
    CertKey,
    fingerprint,
    issue_leaf,
    make_ca,
    make_intermediate,
    to_pkcs12,
    to_truststore,
    truststore_fingerprints,
)

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


def test_a_truststore_holds_each_ca_as_a_trusted_entry_that_java_and_openssl_read() -> None:
    now = datetime.now(UTC)
    cas = [make_ca(common_name=f"ca {i}", now=now).cert for i in range(2)]
    stored = to_truststore(cas)
    assert truststore_fingerprints(stored) == {fingerprint(c) for c in cas}
    assert truststore_fingerprints(stored, password=b"wrong") == frozenset()
    assert truststore_fingerprints(b"not a keystore") == frozenset()
    with tempfile.NamedTemporaryFile(suffix=".p12") as f:
        f.write(stored)
        f.flush()
        info = subprocess.run(["openssl", "pkcs12", "-in", f.name, "-passin", "pass:changeit", "-nokeys", "-info"],
                              capture_output=True, text=True, check=True, timeout=30).stderr
        assert "PBES2, PBKDF2, AES-256-CBC" in info
        assert "MAC: sha256" in info
        keytool = shutil.which("keytool")
        if keytool:  # a JDK is on this machine kind; where it is not, openssl above still read the file
            listed = subprocess.run([keytool, "-list", "-storetype", "PKCS12", "-keystore", f.name,
                                     "-storepass", "changeit"], capture_output=True, text=True, check=True,
                                    timeout=60).stdout
            assert listed.count("trustedCertEntry") == 2
