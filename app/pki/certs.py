"""Certificate authorities and leaf certificates.

Time is always a parameter (`now`), serials are random, `not_before` is backdated for clock skew and
the extensions are the ones a strict verifier (cryptography.x509.verification, Go's crypto/x509) wants:
critical basic constraints and key usage, SKI on every certificate, AKI and SAN on every leaf.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import overload

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tls_injector.names import DEFAULT_KEY_ALGORITHM, NAME
from tls_injector.pki.keys import KeyType, PrivateKey, generate_key, key_from_pem, key_to_pem, signature_hash

# Nodes whose clocks run a few minutes behind must still accept a certificate issued just now.
BACKDATE = timedelta(minutes=5)
CA_VALIDITY = timedelta(days=365)
LEAF_VALIDITY = timedelta(days=90)
# The subject of a leaf that names nothing (a workload no Service selects, whose own name is no Service name):
# spaces and a colon, so it can never equal a host name a client dials. OpenSSL and Python's ssl still fall
# back to the CN when a certificate has no DNS SAN, and a CN such as `tls-injector` (no dot, so outside the
# CA's name constraints' reach in OpenSSL) would verify for a client dialling the Service `tls-injector`.
NAMELESS_SUBJECT = f"{NAME}: no Service name"


@dataclass(frozen=True)
class CertKey:
    """A certificate with its private key (for a CA: the signer) and the issuers above it.

    `chain` runs from the direct issuer upwards and may end with the self-signed root; a server sends
    the certificate and the intermediates (`chain_pem`), clients hold the root (`anchor`) in a bundle.
    """

    cert: x509.Certificate
    key: PrivateKey
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def cert_pem(self) -> bytes:
        return to_pem([self.cert])

    @property
    def key_pem(self) -> bytes:
        return key_to_pem(self.key)

    @property
    def chain_pem(self) -> bytes:
        """What a server sends (`tls.crt`): the certificate, then every intermediate, never the root."""
        return to_pem([self.cert, *(c for c in self.chain if not is_self_signed(c))])

    @property
    def full_chain_pem(self) -> bytes:
        """The certificate and every issuer up to the root, for storing a CA so it can be reloaded whole."""
        return to_pem([self.cert, *self.chain])

    @property
    def anchor(self) -> x509.Certificate:
        """The certificate clients must trust for this one to verify: the top of the chain."""
        return self.chain[-1] if self.chain else self.cert


def make_ca(
    *,
    common_name: str,
    now: datetime,
    validity: timedelta = CA_VALIDITY,
    key_type: KeyType = DEFAULT_KEY_ALGORITHM,
    issuer: CertKey | None = None,
    path_length: int | None = None,
    permitted_dns: Sequence[str] = (),
    permitted_uri: Sequence[str] = (),
) -> CertKey:
    """A self-signed root, or an intermediate when `issuer` is given.

    With `permitted_dns`, the CA carries critical NameConstraints: the DNS names of every certificate under
    it must lie in one of those subtrees, and it may name no IP address at all (0.0.0.0/0 and ::/0 are
    excluded), so even a bug in choosing names cannot make it sign `example.com` or `10.96.0.1`.
    """
    key = generate_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    signer = issuer.key if issuer else key
    cap = issuer.cert.not_valid_after_utc if issuer else None  # an intermediate never outlives its root
    builder = _base(name, key, now, validity, cap=cap).issuer_name(issuer.cert.subject if issuer else name)
    builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
    builder = builder.add_extension(_key_usage(ca=True, rsa_key=False), critical=True)
    if permitted_dns or permitted_uri:
        builder = builder.add_extension(name_constraints(permitted_dns, permitted_uri), critical=True)
    signer_public = issuer.cert.public_key() if issuer else key.public_key()
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_public),  # type: ignore[arg-type]
        critical=False,
    )
    chain = (issuer.cert, *issuer.chain) if issuer else ()
    return CertKey(builder.sign(signer, signature_hash(signer)), key, chain)


def name_constraints(permitted_dns: Sequence[str], permitted_uri: Sequence[str] = ()) -> x509.NameConstraints:
    """Permitted DNS subtrees and URI hosts (RFC 5280 4.2.1.10: "east.mesh" permits URIs whose host is
    exactly east.mesh, such as spiffe://east.mesh/ns/a/sa/b), and no IP address at all."""
    return x509.NameConstraints(
        permitted_subtrees=[*(x509.DNSName(name) for name in permitted_dns),
                            *(x509.UniformResourceIdentifier(host) for host in permitted_uri)],
        excluded_subtrees=[x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
                           x509.IPAddress(ipaddress.ip_network("::/0"))],
    )


def issue_leaf(
    *,
    issuer: CertKey,
    dns_names: Sequence[str],
    now: datetime,
    validity: timedelta = LEAF_VALIDITY,
    ip_addresses: Iterable[str] = (),
    server: bool = True,
    client: bool = False,
    key_type: KeyType = DEFAULT_KEY_ALGORITHM,
    uris: Sequence[str] = (),
    key: PrivateKey | None = None,
) -> CertKey:
    """A leaf for the given names (and URI SANs), never valid past its issuer (a client would reject the chain);
    its key made here, or `key`, made ahead (of `key_type`: the caller's word).

    With no name at all it has no SAN extension (RFC 5280 forbids an empty one) and the subject
    NAMELESS_SUBJECT: a certificate no client can verify for any host, which a pod can still mount and
    start with until its workload has a name (docs/injection.md, "Workloads whose name is no Service name").
    """
    key = key if key is not None else generate_key(key_type)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    sans += [x509.UniformResourceIdentifier(uri) for uri in uris]
    common_name = dns_names[0] if dns_names else (uris[0] if uris else NAME if sans else NAMELESS_SUBJECT)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    builder = _base(name, key, now, validity, cap=issuer.cert.not_valid_after_utc)
    builder = builder.issuer_name(issuer.cert.subject)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    builder = builder.add_extension(_key_usage(ca=False, rsa_key=isinstance(key, rsa.RSAPrivateKey)), critical=True)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.cert.public_key()),  # type: ignore[arg-type]
        critical=False,
    )
    return CertKey(builder.sign(issuer.key, signature_hash(issuer.key)), key, (issuer.cert, *issuer.chain))


def load_cert_key(cert_pem: bytes, key_pem: bytes) -> CertKey:
    """A PEM chain (certificate first) with its key; ValueError when they do not belong together."""
    certs = load_certificates(cert_pem)
    if not certs:
        raise ValueError("no certificate could be read from the PEM data")
    key = key_from_pem(key_pem)
    if not key_matches(certs[0], key):
        raise ValueError("the private key does not match the certificate")
    return CertKey(certs[0], key, tuple(certs[1:]))


def key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    return bool(cert.public_key() == key.public_key())


def same_key(a: x509.Certificate, b: x509.Certificate) -> bool:
    """Both certificates are for one key pair: whoever holds its private key can sign as either."""
    return bool(a.public_key() == b.public_key())


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """`ca` signed `cert` (names and signature checked; nothing else)."""
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # InvalidSignature, ValueError (name mismatch), TypeError (key type): all mean "no"
        return False
    return True


def is_self_signed(cert: x509.Certificate) -> bool:
    return cert.issuer == cert.subject


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER encoding, lowercase hex: the identity of a certificate in keys and bundles."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def to_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


class Chains(Sequence[list[x509.Certificate]]):
    """Served chains, each parsed when first read and then kept: from a Secret's `tls.crt` as the API
    carries it (base64, `encoded`) or from PEM. A full pass hands the trust state machine every leaf in
    use (100,000 at 100,000 workloads); with one CA, the first chain settles whether a leaf chains to it,
    so the others are never decoded (parsing them all was ~8% of a converged pass, and ~1 KiB each held
    to its end). Only a rotation, asking of an old CA, reads them all. Undecodable data is no chain ([]),
    as load_certificates makes of it."""

    def __init__(self, encoded: Sequence[object] = (), pem: Sequence[bytes] = ()) -> None:
        self._sources: list[object] = [*encoded, *pem]
        self._encoded = len(encoded)
        self._parsed: list[list[x509.Certificate]] = []

    def __len__(self) -> int:
        return len(self._sources)

    @overload
    def __getitem__(self, index: int) -> list[x509.Certificate]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[x509.Certificate]]: ...

    def __getitem__(self, index: int | slice) -> list[x509.Certificate] | list[list[x509.Certificate]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        while len(self._parsed) <= position:
            at = len(self._parsed)
            self._parsed.append(self._parse(self._sources[at], encoded=at < self._encoded))
        return self._parsed[position]

    def __iter__(self) -> Iterator[list[x509.Certificate]]:
        for index in range(len(self)):
            yield self[index]

    @staticmethod
    def _parse(source: object, *, encoded: bool) -> list[x509.Certificate]:
        if not isinstance(source, (str, bytes)):
            return []
        if encoded:
            try:
                source = base64.b64decode(source, validate=True)
            except ValueError:
                return []
        return load_certificates(source.encode() if isinstance(source, str) else source)


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM chain or bundle; [] when there are none or the data does not parse.

    Never raises: the reconciler reads Secrets and ConfigMaps anyone may have edited, and one mangled
    object must not stop a pass. Unreadable data trusts nothing and chains to nothing, which is what a
    client would make of it; callers that need a reason (load_cert_key, load_user_ca) give one.
    """
    if not pem.strip():
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def not_after(cert_pem: bytes) -> datetime:
    """Expiry of the first certificate in a PEM chain (for metrics and decisions)."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def _base(
    name: x509.Name, key: PrivateKey, now: datetime, validity: timedelta, cap: datetime | None = None
) -> x509.CertificateBuilder:
    end = now + validity
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(end, cap) if cap else end)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _key_usage(*, ca: bool, rsa_key: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=rsa_key,  # RSA key exchange in TLS 1.2; meaningless for EC and Ed25519 keys
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
