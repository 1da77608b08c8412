"""Private keys: generation and PEM (PKCS#8, unencrypted: a Secret is the protection at rest)."""

from __future__ import annotations

from typing import Literal, get_args

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

KeyType = Literal["ecdsa-p256", "rsa-2048", "rsa-3072", "ed25519"]
KEY_TYPES: tuple[KeyType, ...] = get_args(KeyType)
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def generate_key(key_type: KeyType = "ecdsa-p256") -> PrivateKey:
    """P-256 by default: 0.02 ms to generate against RSA-2048's 64 ms, and accepted by every TLS stack."""
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    bits = {"rsa-2048": 2048, "rsa-3072": 3072}[key_type]
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def signature_hash(key: PrivateKey) -> hashes.SHA256 | None:
    """Ed25519 signs the message itself; the others sign a SHA-256 digest."""
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def key_to_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def key_from_pem(data: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, PrivateKey):
        raise ValueError(f"unsupported private key type {type(key).__name__}")
    return key
