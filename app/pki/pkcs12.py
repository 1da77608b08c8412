"""PKCS#12 output (opt-in, for Java and .NET workloads that want a keystore instead of PEM files).

The profile is the modern one OpenSSL 3 writes by default: PBES2 with PBKDF2-HMAC-SHA256 and AES-256-CBC
for the key and the certificates, and an HMAC-SHA256 MAC. The legacy 3DES/RC2 profile is not offered:
OpenSSL 3 needs its legacy provider to read RC2, and FIPS builds refuse both.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    KeySerializationEncryption,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)

from tls_injector.pki.certs import CertKey, fingerprint, is_self_signed, load_cert_key
from tls_injector.pki.keys import PrivateKey

# OpenSSL 3 itself uses 2048 PBKDF2 rounds. The password usually sits in the same Secret as the file,
# so the KDF guards little; 10,000 rounds costs ~5 ms per keystore, cheap at thousands of workloads.
KDF_ROUNDS = 10_000


def to_pkcs12(
    leaf: CertKey, *, password: bytes, name: str | None = None, trusted: Sequence[x509.Certificate] = ()
) -> bytes:
    """The leaf, its key and its intermediates (and `trusted` CAs, e.g. the bundle) in one keystore."""
    if not password:
        # An empty password makes some readers (Java's keytool among them) skip the MAC check entirely.
        raise ValueError("a PKCS#12 keystore needs a non-empty password")
    encryption = _modern_encryption(password)
    intermediates = [c for c in leaf.chain if not is_self_signed(c)]
    extra = [c for c in trusted if c not in intermediates]
    return pkcs12.serialize_key_and_certificates(
        (name or "").encode() or None, leaf.key, leaf.cert, [*intermediates, *extra] or None, encryption
    )


# A truststore holds only public certificates, so its password guards nothing secret; Java's keytool and
# its default trust store use "changeit", which JVM users already pass (javax.net.ssl.trustStorePassword).
TRUSTSTORE_PASSWORD = b"changeit"


def to_truststore(cas: Sequence[x509.Certificate], *, password: bytes = TRUSTSTORE_PASSWORD) -> bytes:
    """A PKCS#12 truststore (Java's trusted-certificate entries) of `cas`, in the same modern profile as
    `to_pkcs12`: PBES2 (PBKDF2-HMAC-SHA256, AES-256-CBC) and an HMAC-SHA256 MAC, what Java 11.0.12+ and
    OpenSSL 3 read and write by default. Each CA is one entry, named by its SHA-256 prefix."""
    if not cas:
        raise ValueError("a truststore needs at least one CA")
    encryption = _modern_encryption(password)
    entries = [pkcs12.PKCS12Certificate(c, fingerprint(c)[:16].encode()) for c in cas]
    return pkcs12.serialize_java_truststore(entries, encryption)


def truststore_fingerprints(data: bytes, *, password: bytes = TRUSTSTORE_PASSWORD) -> frozenset[str]:
    """The CAs a stored truststore trusts (SHA-256 fingerprints); empty when it cannot be read. The bytes
    differ on every write (random salts), so a pass compares contents, never bytes, to write only on change."""
    try:
        stored = pkcs12.load_pkcs12(data, password)
    except (ValueError, TypeError):
        return frozenset()
    return frozenset(fingerprint(c.certificate) for c in stored.additional_certs)


def _modern_encryption(password: bytes) -> KeySerializationEncryption:
    """PBES2 (PBKDF2-HMAC-SHA256, AES-256-CBC) with an HMAC-SHA256 MAC: Java 11.0.12+ and OpenSSL 3's default."""
    return (
        PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(KDF_ROUNDS)
        .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
        .hmac_hash(hashes.SHA256())
        .build(password)
    )


# The alias of the key entry in a workload's keystore (its PKCS#12 friendlyName): what Java's `keytool -list`
# shows and what `server.ssl.key-alias`-style settings name; one entry, so most readers need not name it.
KEYSTORE_ALIAS = "tls"


def keystore_of(cert_pem: bytes, key_pem: bytes, *, password: bytes) -> bytes:
    """A workload's keystore: its key and its chain (`tls.crt`: the leaf, then the intermediates) under
    KEYSTORE_ALIAS, in the modern profile of `to_pkcs12`. ValueError when the key does not match the leaf."""
    return to_pkcs12(load_cert_key(cert_pem, key_pem), password=password, name=KEYSTORE_ALIAS)


def keystore_holds(data: bytes, *, password: bytes, cert_pem: bytes, key_pem: bytes) -> bool:
    """The stored keystore opens with `password` and holds exactly this key and chain. PKCS#12 bytes
    differ on every write (random salts and IVs), so a pass compares contents to write only on change;
    a keystore that does not open (another password, tampered, not PKCS#12) holds nothing."""
    try:
        stored = pkcs12.load_pkcs12(data, password)
        wanted = load_cert_key(cert_pem, key_pem)
    except (ValueError, TypeError):
        return False
    if stored.key is None or stored.cert is None or not isinstance(stored.key, type(wanted.key)):
        return False
    chain = [wanted.cert, *(c for c in wanted.chain if not is_self_signed(c))]
    held = [stored.cert.certificate, *(c.certificate for c in stored.additional_certs)]
    return _private_bytes(stored.key) == _private_bytes(wanted.key) and held == chain


def _private_bytes(key: object) -> bytes:
    """A private key's PKCS#8 DER, to compare two keys by value."""
    assert isinstance(key, PrivateKey)
    return key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
