"""Checks on a serving certificate and key before a server uses them. Pure: bytes and `now` in.

A server that starts with an unusable pair fails every handshake later, where the cause is far harder
to see; so each problem is named here once, in one line that names the file: unreadable PEM, an
encrypted key (a server cannot prompt for its passphrase), a key that does not belong to the
certificate, a weak key, or a certificate outside its validity period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

# RSA below 2048 bits is refused by NIST SP 800-131A since 2013 and by current TLS clients.
MIN_RSA_BITS = 2048
# Curves Go's crypto/tls (the kube-apiserver's client) negotiates for ECDSA certificates.
ALLOWED_CURVES = frozenset({"secp256r1", "secp384r1", "secp521r1"})


class ServingPairError(ValueError):
    """What is wrong with a serving pair, in one line that names the file."""


@dataclass(frozen=True)
class ServingPair:
    not_before: datetime
    not_after: datetime


def check_serving_pair(
    cert_pem: bytes, key_pem: bytes, *, now: datetime, cert_name: str = "certificate", key_name: str = "key"
) -> ServingPair:
    """The validity of a usable pair; ServingPairError naming the file and the problem otherwise."""
    cert = _certificate(cert_pem, cert_name)
    key = _private_key(key_pem, key_name)
    _check_strength(key, key_name)
    if _public(cert.public_key()) != _public(key.public_key()):
        raise ServingPairError(f"{key_name}: the private key does not belong to the certificate in {cert_name}")
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        raise ServingPairError(f"{cert_name}: the certificate is not valid until {start.isoformat()}")
    if now > end:  # RFC 5280: the period includes notAfter itself
        raise ServingPairError(f"{cert_name}: the certificate expired on {end.isoformat()}")
    return ServingPair(start, end)


def _certificate(pem: bytes, name: str) -> x509.Certificate:
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ServingPairError(f"{name}: no PEM certificate could be read") from None
    return chain[0]


def _private_key(pem: bytes, name: str) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except TypeError:  # cryptography's signal that the key needs a password
        raise ServingPairError(f"{name}: the private key is encrypted; give it unencrypted (the server "
                               "cannot ask for a passphrase; protect it with file permissions)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ServingPairError(f"{name}: no PEM private key could be read") from None


def _check_strength(key: PrivateKeyTypes, name: str) -> None:
    # Ed25519 is allowed: TLS 1.3 clients, Go's included, accept it.
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < MIN_RSA_BITS:
        raise ServingPairError(f"{name}: RSA key of {key.key_size} bits is too weak; use at least {MIN_RSA_BITS} "
                               "bits or ECDSA P-256")
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name not in ALLOWED_CURVES:
        raise ServingPairError(f"{name}: elliptic curve {key.curve.name} is not accepted by TLS clients; use P-256")
    if isinstance(key, dsa.DSAPrivateKey | ed448.Ed448PrivateKey):
        raise ServingPairError(f"{name}: {type(key).__name__.removeprefix('_')} keys cannot serve TLS to "
                               "Kubernetes clients; use ECDSA P-256 or RSA")


def _public(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
