"""Trust bundles: the ConfigMap data clients mount to trust the CAs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from cryptography import x509

from tls_injector.pki.certs import fingerprint, load_certificates, to_pem

# 16 hex digits = 64 bits of SHA-256: a collision among a handful of CAs has odds around 2^-60, and the
# key stays short enough to read in `kubectl describe`.
PER_CA_PREFIX_LENGTH = 16


def trust_bundle(cas: Iterable[x509.Certificate], *, now: datetime, prefix: str = "ca") -> dict[str, str]:
    """`<prefix>-bundle.crt` with every CA, plus one `<prefix>-<sha256 prefix>.crt` per CA.

    Deduplicated by SHA-256, expired CAs dropped (no client would accept them, and they only grow the
    bundle), oldest first then by fingerprint so equal inputs give byte-equal data (no spurious writes).
    The per-CA keys let a consumer that trusts `*.crt` files one by one (Strimzi proposal 073) see each.
    """
    unique = {fingerprint(c): c for c in cas if c.not_valid_after_utc > now}
    ordered = sorted(unique.items(), key=lambda item: (item[1].not_valid_before_utc, item[0]))
    data = {f"{prefix}-bundle.crt": to_pem(c for _, c in ordered).decode()}
    data.update({f"{prefix}-{fp[:PER_CA_PREFIX_LENGTH]}.crt": to_pem([c]).decode() for fp, c in ordered})
    return data


def bundle_certificates(data: dict[str, str], *, prefix: str = "ca") -> list[x509.Certificate]:
    """The CAs of a bundle as it is stored (the reconciler's view of a bundle in use).

    [] when it is missing, empty or mangled: such a bundle trusts no CA, so no CA counts as propagated
    until the bundle is rewritten — the safe reading for the trust state machine.
    """
    return load_certificates(str(data.get(f"{prefix}-bundle.crt") or "").encode())
