"""PKCS#12 output (opt-in, for Java and .NET workloads that want a keystore instead of PEM files).

The profile is the modern one OpenSSL 3 writes by default: PBES2 with PBKDF2-HMAC-SHA256 and AES-256-CBC
for the key and the certificates, and an HMAC-SHA256 MAC. The legacy 3DES/RC2 profile is not offered:
OpenSSL 3 needs its legacy provider to read RC2, and FIPS builds refuse both.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import PrivateFormat, pkcs12

from app.pki.certs import CertKey, is_self_signed

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
    encryption = (
        PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(KDF_ROUNDS)
        .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
        .hmac_hash(hashes.SHA256())
        .build(password)
    )
    intermediates = [c for c in leaf.chain if not is_self_signed(c)]
    extra = [c for c in trusted if c not in intermediates]
    return pkcs12.serialize_key_and_certificates(
        (name or "").encode() or None, leaf.key, leaf.cert, [*intermediates, *extra] or None, encryption
    )
