"""Pod certificates (certificates.k8s.io PodCertificateRequest): a leaf for a public key the kubelet made.

The kubelet generates the key on the node and sends only its public half, inside a stub PKCS#10 request
(v1, and v1beta1 from 1.36) or as a bare PKIX key (v1beta1, deprecated). The apiserver has already
checked the CSR's signature (or the proof of possession), so the signer only extracts the key.

Times follow what the apiserver accepts for an issued request: `notBefore` within 5 minutes of its
clock, a lifetime of at least an hour and at most `spec.maxExpirationSeconds`, and `beginRefreshAt` at
least 10 minutes inside both ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tls_injector.pki.certs import NAMELESS_SUBJECT, CertKey, is_self_signed, to_pem
from tls_injector.pki.keys import signature_hash

# The key types the API names, and those this signer issues for. Ed25519 is refused because the strict
# web-PKI verifiers (Go's for serving certificates in some setups, cryptography's, browsers) reject it;
# P-521 because neither the CA/Browser Forum profile nor several TLS stacks accept it. RSA-3072/4096
# and P-256/P-384 work with every TLS client this project is tested against.
API_KEY_TYPES = ("RSA3072", "RSA4096", "ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519")
ISSUED_KEY_TYPES = frozenset({"RSA3072", "RSA4096", "ECDSAP256", "ECDSAP384"})
DEFAULT_POD_KEY_TYPE = "ECDSAP256"  # what the webhook asks the kubelet for: fast, accepted everywhere

# Pod certificates live a day (the apiserver's default cap, and what kubernetes.io signers issue), and
# are refreshed with the same share of their life left as the 90-day Secret leaves are renewed with
# (35 of 90 days): refresh at 55/90 of the lifetime, ~14.7 hours into a day.
POD_CERT_VALIDITY = timedelta(hours=24)
REFRESH_FRACTION = 55 / 90
# The apiserver rejects a notBefore more than 5 minutes from its own clock, so the Secret leaves'
# 5-minute backdate would fail on any skew at all; 1 minute still covers nodes running a little behind
# while leaving 4 minutes for this process's clock to differ from the apiserver's.
POD_BACKDATE = timedelta(minutes=1)
MIN_LIFETIME = timedelta(hours=1)  # the apiserver's floor
REFRESH_MARGIN = timedelta(minutes=10)  # beginRefreshAt must be this far inside both ends
MAX_CSR_BYTES = 16 * 1024  # a stub CSR holds one public key: RSA-4096's is ~600 bytes in DER

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class KeyRejected(ValueError):
    """The request's public key cannot be read, or is of a type this signer does not issue for."""

    def __init__(self, message: str, *, key_type: str = "") -> None:
        super().__init__(message)
        self.key_type = key_type


@dataclass(frozen=True)
class PodCertTimes:
    not_before: datetime
    not_after: datetime
    begin_refresh_at: datetime


def requested_key(*, stub_pkcs10: bytes = b"", pkix: bytes = b"") -> PublicKey:
    """The public key of a request (DER bytes as the API carries them, base64 already decoded)."""
    if len(stub_pkcs10) > MAX_CSR_BYTES or len(pkix) > MAX_CSR_BYTES:
        raise KeyRejected(f"the request's key material is over {MAX_CSR_BYTES} bytes")
    try:
        key = (x509.load_der_x509_csr(stub_pkcs10).public_key() if stub_pkcs10
               else serialization.load_der_public_key(pkix))
    except (ValueError, TypeError) as e:
        raise KeyRejected("the request carries no readable public key") from e
    if not isinstance(key, PublicKey):
        raise KeyRejected(f"unsupported public key {type(key).__name__}")
    return key


def key_type_of(key: PublicKey) -> str:
    """The API's name for a key type (RSA3072, ECDSAP256, ED25519, ...); "" for one it does not name."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ED25519"
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA{key.key_size}" if key.key_size in (3072, 4096) else ""
    curves = {"secp256r1": "ECDSAP256", "secp384r1": "ECDSAP384", "secp521r1": "ECDSAP521"}
    return curves.get(key.curve.name, "")


def vet_key_type(key: PublicKey) -> str:
    """The key's type when this signer issues for it; KeyRejected naming what it does issue for otherwise."""
    kind = key_type_of(key)
    if kind not in ISSUED_KEY_TYPES:
        raise KeyRejected(f"key type {kind or 'unknown'} is not issued by this signer; use {DEFAULT_POD_KEY_TYPE} "
                          f"(or one of {', '.join(sorted(ISSUED_KEY_TYPES))})", key_type=kind)
    return kind


def pod_cert_times(*, now: datetime, max_expiration_seconds: int, issuer_not_after: datetime,
                   validity: timedelta = POD_CERT_VALIDITY) -> PodCertTimes:
    """When the certificate starts, ends and should be refreshed; ValueError when no valid span exists.

    Whole seconds: X.509 times carry no fractions, and the status times must equal the leaf's exactly.
    """
    start = (now - POD_BACKDATE).replace(microsecond=0)
    end = min(start + min(validity, timedelta(seconds=max_expiration_seconds)), issuer_not_after)
    end = end.replace(microsecond=0)
    if end - start < MIN_LIFETIME:
        raise ValueError(f"the signing CA ends at {issuer_not_after:%Y-%m-%dT%H:%M:%SZ}, too soon for a "
                         f"certificate of at least {MIN_LIFETIME}")
    refresh = start + (end - start) * REFRESH_FRACTION
    refresh = min(max(refresh, start + REFRESH_MARGIN), end - REFRESH_MARGIN).replace(microsecond=0)
    return PodCertTimes(start, end, refresh)


def issue_for_key(*, issuer: CertKey, public_key: PublicKey, dns_names: Sequence[str],
                  times: PodCertTimes) -> bytes:
    """The certificate chain (leaf, then intermediates, never the root) for the kubelet's key, PEM.

    Same profile as the Secret leaves (verify.py accepts both): serverAuth, SANs, AKI/SKI, critical
    basic constraints and key usage; keyEncipherment only for RSA keys.
    """
    # No name (a pod whose workload's own name is no Service name): no SAN extension, which may not be empty,
    # and the subject no host name can equal, as for a Secret's leaf (certs.NAMELESS_SUBJECT).
    common_name = dns_names[0] if dns_names else NAMELESS_SUBJECT
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(times.not_before)
        .not_valid_after(times.not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if dns_names:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                                        critical=False)
    builder = (
        builder
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_leaf_usage(rsa_key=isinstance(public_key, rsa.RSAPublicKey)), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            issuer.cert.public_key()), critical=False)  # type: ignore[arg-type]
    )
    leaf = builder.sign(issuer.key, signature_hash(issuer.key))
    return to_pem([leaf, *(c for c in (issuer.cert, *issuer.chain) if not is_self_signed(c))])


def _leaf_usage(*, rsa_key: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=rsa_key,
                         data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                         encipher_only=False, decipher_only=False)

