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

from app.pki.certs import CA_VALIDITY, LEAF_VALIDITY, CertKey, issue_leaf, issued_by, load_certificates, make_ca
from app.pki.keys import KeyType
from app.pki.renewal import CA_LOOKAHEAD, Decision, ca_renewal

CaRole = Literal["serving", "client"]
# ConfigMap key prefix of each role's bundle: `ca-bundle.crt` for the serving CAs (the contract in names.py), and
# `client-ca-bundle.crt` for the CAs a server accepts client certificates from.
BUNDLE_PREFIX: dict[CaRole, str] = {"serving": "ca", "client": "client-ca"}


def make_root(role: CaRole, *, now: datetime, validity: timedelta = CA_VALIDITY,
              key_type: KeyType = "ecdsa-p256") -> CertKey:
    """A self-signed root for a role. The date in its name tells successive roots apart in logs and
    lets verifiers that build paths by subject name pick the right one quickly."""
    return make_ca(common_name=f"tls-injector {role} root {now:%Y-%m-%d %H:%M}", now=now, validity=validity,
                   key_type=key_type)


def make_intermediate(root: CertKey, *, domain: str, now: datetime, validity: timedelta = CA_VALIDITY,
                      key_type: KeyType = "ecdsa-p256") -> CertKey:
    """An intermediate for one trust domain. Path length 0: it signs leaves, never another CA."""
    if not domain.strip():
        raise ValueError("a trust domain needs a name")
    return make_ca(common_name=f"tls-injector {domain.strip()} intermediate {now:%Y-%m-%d %H:%M}"[:64], now=now,
                   validity=validity, key_type=key_type, issuer=root, path_length=0)


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
                 key_type: KeyType = "ecdsa-p256", uris: Sequence[str] = ()) -> CertKey:
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
