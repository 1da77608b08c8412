"""Chain verification the way a TLS client (or an mTLS server) does it, at a given time.

cryptography.x509.verification implements the strict web-PKI profile (RFC 5280 + CA/B Forum): it is
what decides here whether a leaf is trusted. That profile forbids Ed25519 keys and signatures, so a
chain holding one is checked by a plain walk instead (issuer signature, validity window, CA flag, name,
EKU, name constraints) — the rules OpenSSL and Go apply to Ed25519 chains, which they accept in TLS 1.3.
The same walk checks a client chain under a URI name constraint (a federation member's client
intermediate is pinned to its SPIFFE trust domain): the profile refuses every such chain ("unsupported
name constraint"), where OpenSSL, Go and BoringSSL apply the constraint.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, SignatureAlgorithmOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

# A leaf, one intermediate per trust domain, a root: 3. Allow one more for user-provided hierarchies.
MAX_CHAIN_DEPTH = 4


class UntrustedChain(ValueError):
    """The certificate does not chain to a trusted CA for the asked use (message says why)."""


def verify_server(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    *,
    trusted: Sequence[x509.Certificate],
    dns_name: str,
    now: datetime,
) -> list[x509.Certificate]:
    """The verified chain, leaf first and trust anchor last, for a server presenting `dns_name`."""
    if not trusted:
        raise UntrustedChain("no trusted CA")
    if _uses_ed25519([leaf, *intermediates]):
        return _walk(leaf, intermediates, trusted=trusted, now=now, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                     dns_name=dns_name)
    verifier = _policy(trusted, now).build_server_verifier(x509.DNSName(dns_name))
    try:
        return verifier.verify(leaf, list(intermediates))
    except VerificationError as e:
        raise UntrustedChain(str(e)) from e


def verify_nameless(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    *,
    trusted: Sequence[x509.Certificate],
    now: datetime,
) -> list[x509.Certificate]:
    """The verified chain of a serving leaf that names nothing (certs.NAMELESS_SUBJECT): the web-PKI
    profile refuses any leaf without a SAN, so the chain is walked link by link (issuer signatures, validity,
    CA flags, path lengths, EKU serverAuth), as for Ed25519. No name to check, so no name constraint either;
    one with a DNS SAN is not nameless and is refused here."""
    if not trusted:
        raise UntrustedChain("no trusted CA")
    if dns_sans(leaf):
        raise UntrustedChain("the certificate names DNS names")
    return _walk(leaf, intermediates, trusted=trusted, now=now, usage=ExtendedKeyUsageOID.SERVER_AUTH)


def verify_client(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    *,
    trusted: Sequence[x509.Certificate],
    now: datetime,
) -> list[x509.Certificate]:
    """The verified chain of a client certificate, as an mTLS server checks it."""
    if not trusted:
        raise UntrustedChain("no trusted CA")
    if _uses_ed25519([leaf, *intermediates]) or _uri_constrained([*intermediates, *trusted]):
        return _walk(leaf, intermediates, trusted=trusted, now=now, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    try:
        return _policy(trusted, now).build_client_verifier().verify(leaf, list(intermediates)).chain
    except VerificationError as e:
        raise UntrustedChain(str(e)) from e


def _policy(trusted: Sequence[x509.Certificate], now: datetime) -> PolicyBuilder:
    return PolicyBuilder().store(Store(list(trusted))).time(now).max_chain_depth(MAX_CHAIN_DEPTH)


def _uses_ed25519(certs: Sequence[x509.Certificate]) -> bool:
    return any(
        c.signature_algorithm_oid == SignatureAlgorithmOID.ED25519
        or isinstance(c.public_key(), ed25519.Ed25519PublicKey)
        for c in certs
    )


def _walk(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    *,
    trusted: Sequence[x509.Certificate],
    now: datetime,
    usage: x509.ObjectIdentifier,
    dns_name: str | None = None,
) -> list[x509.Certificate]:
    """Ed25519 only: follow issuers from the leaf to a trusted certificate, checking each link."""
    _check_leaf(leaf, usage=usage, dns_name=dns_name, now=now)
    chain = [leaf]
    while len(chain) <= MAX_CHAIN_DEPTH:
        current = chain[-1]
        anchor = _issuer_among(current, trusted, now)
        if anchor is not None:
            return _check_name_constraints(_check_path_lengths([*chain, anchor]))
        parent = _issuer_among(current, intermediates, now)
        if parent is None or parent in chain:
            break
        chain.append(parent)
    raise UntrustedChain("no chain from the certificate to a trusted CA")


def _check_path_lengths(chain: list[x509.Certificate]) -> list[x509.Certificate]:
    """RFC 5280 4.2.1.9: a CA at position k (leaf = 0) has k - 1 CAs below it; its pathLen caps that."""
    for position, ca in enumerate(chain[1:], start=1):
        limit = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length
        if limit is not None and position - 1 > limit:
            raise UntrustedChain(f"path length of {ca.subject.rfc4514_string()} exceeded")
    return chain


def _uri_constrained(certs: Sequence[x509.Certificate]) -> bool:
    return any(isinstance(name, x509.UniformResourceIdentifier)
               for cert in certs for name in _constraints(cert)[0] + _constraints(cert)[1])


def _constraints(cert: x509.Certificate) -> tuple[list[x509.GeneralName], list[x509.GeneralName]]:
    """The permitted and excluded subtrees of the certificate's NameConstraints."""
    try:
        value = cert.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return [], []
    return list(value.permitted_subtrees or ()), list(value.excluded_subtrees or ())


def _dns_within(name: str, subtree: str) -> bool:
    """RFC 5280 4.2.1.10: a DNS subtree is the name and every name below it."""
    name, subtree = name.lower().rstrip("."), subtree.lower().rstrip(".")
    return (name == subtree.lstrip(".") and not subtree.startswith(".")) or name.endswith("." + subtree.lstrip("."))


def _uri_within(uri: str, subtree: str) -> bool:
    """RFC 5280 4.2.1.10: a URI subtree is a host ("east.mesh": that host only) or a domain (".mesh": the
    hosts below it), matched against the URI's host."""
    try:
        host = (urllib.parse.urlsplit(uri).hostname or "").rstrip(".")
    except ValueError:
        return False
    subtree = subtree.lower()
    return host.endswith(subtree) if subtree.startswith(".") else host == subtree


def _ip_within(address: Any, subtree: Any) -> bool:
    return isinstance(subtree, ipaddress.IPv4Network | ipaddress.IPv6Network) and address in subtree


_WITHIN: dict[type[x509.GeneralName], Callable[[Any, Any], bool]] = {
    x509.DNSName: _dns_within, x509.UniformResourceIdentifier: _uri_within, x509.IPAddress: _ip_within}


def _check_name_constraints(chain: list[x509.Certificate]) -> list[x509.Certificate]:
    """Every name of the leaf within each CA's permitted subtrees of its type (when it has any) and
    outside its excluded ones."""
    try:
        sans = list(chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        sans = []
    for ca in chain[1:]:
        permitted, excluded = _constraints(ca)
        for san in sans:
            within = _WITHIN.get(type(san))
            if within is None:
                continue
            allowed = [c.value for c in permitted if type(c) is type(san)]
            if (allowed and not any(within(san.value, c) for c in allowed)) or any(
                    within(san.value, c.value) for c in excluded if type(c) is type(san)):
                raise UntrustedChain(f"{san.value} is outside the name constraints of {ca.subject.rfc4514_string()}")
    return chain


def _issuer_among(
    cert: x509.Certificate, candidates: Sequence[x509.Certificate], now: datetime
) -> x509.Certificate | None:
    for candidate in candidates:
        if candidate.subject != cert.issuer or not _valid_at(candidate, now) or not _can_sign(candidate):
            continue
        try:
            cert.verify_directly_issued_by(candidate)
        except (InvalidSignature, ValueError, TypeError):
            continue
        return candidate
    return None


def _check_leaf(leaf: x509.Certificate, *, usage: x509.ObjectIdentifier, dns_name: str | None, now: datetime) -> None:
    if not _valid_at(leaf, now):
        raise UntrustedChain("the certificate is not valid at this time")
    if _is_ca(leaf):
        raise UntrustedChain("a CA certificate cannot be used as a leaf")
    try:
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = None
    if usages is not None and usage not in usages:
        raise UntrustedChain(f"the certificate lacks extended key usage {usage.dotted_string}")
    if dns_name is not None and dns_name not in dns_sans(leaf):
        raise UntrustedChain(f"the certificate is not valid for {dns_name}")


def _valid_at(cert: x509.Certificate, now: datetime) -> bool:
    return cert.not_valid_before_utc <= now <= cert.not_valid_after_utc


def _can_sign(cert: x509.Certificate) -> bool:
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return _is_ca(cert)  # no key usage extension: any usage allowed (RFC 5280 4.2.1.3)
    return _is_ca(cert) and usage.key_cert_sign


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def a_host_for(dns_names: Sequence[str]) -> str:
    """A host name a client could dial that `dns_names` cover: the first that is no wildcard, else the
    first wildcard's `*` as a label (verifiers take host names, never patterns). "" when there is none."""
    plain = [name for name in dns_names if not name.startswith("*.")]
    return plain[0] if plain else dns_names[0].replace("*", "peer", 1) if dns_names else ""


def dns_sans(cert: x509.Certificate) -> list[str]:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName
        )
    except x509.ExtensionNotFound:
        return []


_USAGE_NAMES = {ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth", ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth"}


def extended_key_usages(cert: x509.Certificate) -> list[str]:
    """The certificate's extended key usages as TLS stacks name them (others by dotted OID); [] when absent."""
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return []
    return [_USAGE_NAMES.get(u, u.dotted_string) for u in usages]
