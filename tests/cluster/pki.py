"""The control plane's own PKI, as kubeadm lays it out: one cluster CA, the apiserver's serving
certificate, client certificates for the admin and the controller manager, and the service-account
signing key.

Written here with `cryptography` directly rather than with tls_injector.pki: the cluster's certificates are the
ground our product runs on, not something it makes, and a test of our PKI against a cluster built by
our PKI would prove less.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A day is far longer than any test session and short enough that a leaked test key means nothing.
VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _write(folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pair:
    pair = Pair(folder / f"{stem}.crt", folder / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pair.key.chmod(0o600)
    return pair


class ClusterPKI:
    """Files under `folder`: ca, apiserver, admin, controller-manager (.crt/.key) and sa.key/sa.pub."""

    def __init__(self, folder: Path, *, apiserver_ips: tuple[str, ...] = ()) -> None:
        """`apiserver_ips`: addresses the apiserver's certificate holds besides 127.0.0.1 (a node's
        address, the `kubernetes` Service's ClusterIP: what pods and a kubelet dial)."""
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._now = datetime.datetime.now(datetime.UTC)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_cert = (
            self._builder(_name("tls-injector-test-cluster-ca"), self._ca_key.public_key())
            .issuer_name(_name("tls-injector-test-cluster-ca"))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = _write(folder, "ca", self._ca_cert, self._ca_key)
        self.apiserver = self._leaf("apiserver", _name("kube-apiserver"), server=True, dns=(
            "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local"), ips=("127.0.0.1", *apiserver_ips))
        self.admin = self._leaf("admin", _name("kubernetes-admin", "system:masters"), server=False)
        self.controller_manager = self._leaf("controller-manager", _name("system:kube-controller-manager"),
                                             server=False)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.sa_key = folder / "sa.key"
        self.sa_key.write_bytes(sa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
        self.sa_pub = folder / "sa.pub"
        self.sa_pub.write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def client(self, stem: str, common_name: str, organization: str | None = None) -> Pair:
        """A client certificate of the cluster CA: `system:node:<name>` in `system:nodes` is a kubelet."""
        return self._leaf(stem, _name(common_name, organization), server=False)

    def _builder(self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(self._now - datetime.timedelta(minutes=5))
                .not_valid_after(self._now + VALIDITY))

    def _leaf(self, stem: str, subject: x509.Name, *, server: bool, dns: tuple[str, ...] = (),
              ips: tuple[str, ...] = ()) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (self._builder(subject, key.public_key()).issuer_name(self._ca_cert.subject)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                                  critical=False))
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
            names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return _write(self.folder, stem, builder.sign(self._ca_key, hashes.SHA256()), key)
