"""CA roles and trust domains, after the ScyllaDB proposal.

Two roles never share a CA: the *serving* CA signs server certificates and sits in the bundle clients
trust; the *client* CA signs mTLS client certificates and sits in the bundle servers trust. Keeping them
apart means trusting a server never lets its holder log in as a client, and each rotates on its own.

A trust domain (the proposal's datacenter) may get its own intermediate under the role's root: leaves
are issued by the intermediate and served with it (`CertKey.chain_pem`), clients keep trusting only the
root, and an intermediate can be replaced without touching any bundle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal

from cryptography import x509
from cryptography.x509.oid import NameOID

from tls_injector.names import DEFAULT_KEY_ALGORITHM
from tls_injector.pki.certs import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    CertKey,
    issue_leaf,
    issued_by,
    load_certificates,
    make_ca,
)
from tls_injector.pki.keys import KeyType
from tls_injector.pki.renewal import CA_LOOKAHEAD, Decision, ca_renewal

CaRole = Literal["serving", "client"]
# ConfigMap key prefix of each role's bundle: `ca-bundle.crt` for the serving CAs (the contract in names.py), and
# `client-ca-bundle.crt` for the CAs a server accepts client certificates from.
BUNDLE_PREFIX: dict[CaRole, str] = {"serving": "ca", "client": "client-ca"}


def make_root(role: CaRole, *, now: datetime, validity: timedelta = CA_VALIDITY,
              key_type: KeyType = DEFAULT_KEY_ALGORITHM) -> CertKey:
    """A self-signed root for a role. The date in its name tells successive roots apart in logs and
    lets verifiers that build paths by subject name pick the right one quickly."""
    return make_ca(common_name=f"tls-injector {role} root {now:%Y-%m-%d %H:%M}", now=now, validity=validity,
                   key_type=key_type)


def make_intermediate(root: CertKey, *, domain: str, now: datetime, validity: timedelta = CA_VALIDITY,
                      key_type: KeyType = DEFAULT_KEY_ALGORITHM, permitted_uri: Sequence[str] = ()) -> CertKey:
    """An intermediate for one trust domain. Path length 0: it signs leaves, never another CA. It carries
    the root's permitted DNS subtrees as its own NameConstraints (none when the root has none), so a
    verifier that ignores the root's (some do not check a trust anchor's constraints) still applies them.
    With `permitted_uri` (URI hosts: a SPIFFE trust domain), every URI name under it must have one of those
    hosts. It does not check that `root` may sign a CA (`root_problem` says): tests make too-deep chains."""
    if not domain.strip():
        raise ValueError("a trust domain needs a name")
    return make_ca(common_name=f"tls-injector {domain.strip()} intermediate {now:%Y-%m-%d %H:%M}"[:64], now=now,
                   validity=validity, key_type=key_type, issuer=root, path_length=0,
                   permitted_dns=permitted_dns(root.cert), permitted_uri=permitted_uri)


def root_problem(cert: x509.Certificate, *, now: datetime) -> str:
    """Why `cert` cannot sign intermediates (for a person), empty when it can: it must be a CA (basic
    constraints CA:TRUE, keyCertSign), allow a CA below it (no path length, or one of at least 1), and be
    valid now."""
    try:
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return "the root is not a CA (it has no basic constraints extension)"
    if not basic.ca:
        return "the root is not a CA (basic constraints CA:FALSE)"
    try:
        if not cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign:
            return "the root may not sign certificates (key usage without keyCertSign)"
    except x509.ExtensionNotFound:
        pass  # no key usage extension: every usage is allowed
    if basic.path_length == 0:
        return "the root has path length 0: it may sign leaves only, never an intermediate"
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        return f"the root is not valid now (from {cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} " \
               f"to {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ})"
    return ""


def path_length(cert: x509.Certificate) -> int | None:
    """The CA's path length constraint (None: none, or not a CA)."""
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length
    except x509.ExtensionNotFound:
        return None


def permitted_dns(cert: x509.Certificate) -> tuple[str, ...]:
    """The DNS subtrees of the certificate's NameConstraints (empty: none)."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(n.value) for n in constraints.permitted_subtrees or () if isinstance(n, x509.DNSName))


def permitted_uri(cert: x509.Certificate) -> tuple[str, ...]:
    """The URI hosts of the certificate's NameConstraints (empty: none)."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(n.value) for n in constraints.permitted_subtrees or ()
                 if isinstance(n, x509.UniformResourceIdentifier))


def made_for(intermediate: x509.Certificate, *, domain: str) -> bool:
    """Whether `make_intermediate` made this certificate for `domain`: its common name says so, under
    the issuer's signature, so a copy of another domain's intermediate is told apart by it."""
    names = intermediate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    expected = f"tls-injector {domain.strip()} intermediate "[:64]
    return bool(names) and str(names[0].value).startswith(expected)


def intermediate_renewal(
    *,
    cert_pem: bytes | None,
    key_pem: bytes | None,
    signer: x509.Certificate,
    now: datetime,
    lookahead: timedelta = CA_LOOKAHEAD,
) -> Decision:
    """Like `ca_renewal`, and "ca-rotated" once the root that signs (`signer`) is not its issuer.

    The intermediate is renewed with the CA lookahead, longer than a leaf's, so it never hands out leaves
    that are already inside their own renewal window.
    """
    decision = ca_renewal(cert_pem=cert_pem, key_pem=key_pem, now=now, lookahead=lookahead)
    if decision.renew or cert_pem is None:
        return decision
    cert = load_certificates(cert_pem)[0]
    if cert.issuer != signer.subject or not issued_by(cert, signer):
        return Decision.because("ca-rotated")
    return decision


def issue_client(issuer: CertKey, *, names: Sequence[str] = (), now: datetime, validity: timedelta = LEAF_VALIDITY,
                 key_type: KeyType = DEFAULT_KEY_ALGORITHM, uris: Sequence[str] = ()) -> CertKey:
    """An mTLS client certificate (EKU clientAuth only); `names` (DNS SANs) and `uris` (URI SANs, e.g. a
    SPIFFE ID) are its identities."""
    if not names and not uris:
        raise ValueError("a client certificate needs at least one name (a DNS or URI SAN identifies the client)")
    return issue_leaf(issuer=issuer, dns_names=names, now=now, validity=validity, server=False, client=True,
                      key_type=key_type, uris=uris)


def spiffe_id(trust_domain: str, namespace: str, service_account: str) -> str:
    """`spiffe://<trust domain>/ns/<namespace>/sa/<service account>`, the SPIFFE form of a workload's
    identity in Kubernetes (as Istio and SPIRE's k8s workload attestor name it). Namespaces and service
    accounts are DNS names, valid path segments as they are; the trust domain is lowercased (SPIFFE
    requires it)."""
    return f"spiffe://{trust_domain.lower()}/ns/{namespace}/sa/{service_account}"


def uri_sans(cert: x509.Certificate) -> list[str]:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        return []
