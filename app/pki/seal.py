"""A leaf Secret's seal: proof, checked in microseconds, that these exact bytes passed the full leaf check.

The full check (`leaf_renewal`) verifies the chain as a client would and loads the private key to match
it against the certificate: a signature verification and a key load, ~0.3 ms on a slow core, so seconds
per pass at 10,000 workloads, although nearly every leaf is unchanged since the last pass. So when the
reconciler issues a leaf, or has checked one in full, it records a seal beside it: the leaf's validity
window and an HMAC-SHA256 over the Secret's namespace and name, `tls.crt`, `tls.key`, the DNS names
and that window.

The HMAC key is derived (HKDF) from the private key of the CA that signs now. So nobody without that
key can make a seal; a valid seal says the leaf was issued by the current signer (a seal made under
another CA does not open); and a CA rotation retires every seal at once. Any change to a sealed value
makes the seal fail to open, and the full check runs again. What depends on the time (not yet valid,
expiring) is decided from the sealed window at every pass.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tls_injector.pki.certs import CertKey

_VERSION = "v1"
_INFO = b"tls-injector leaf seal v1"
# "v1 <not_before> <not_after> <64 hex digits>": anything much longer is not one of ours.
_MAX_LENGTH = 128


@dataclass(frozen=True, slots=True)
class Sealed:
    """What an opened seal vouches for, beyond the sealed bytes themselves: the leaf's validity window."""

    not_before: datetime
    not_after: datetime


@dataclass(frozen=True)
class SealedLeaf:
    """The values a seal covers (the DNS names are the ones the leaf was checked or issued for)."""

    namespace: str
    name: str
    cert_pem: bytes
    key_pem: bytes
    dns_names: Sequence[str]
    # The certificate profile it was issued or checked for (app/injection/profile.py, Profile.note), "" for
    # the built-in one: a seal made for one profile does not open for another, so a changed profile (a new
    # key algorithm) is checked in full at the next pass. Left out of the HMAC when "", so the seals of
    # every leaf issued before profiles existed (all built-in) still open, with no write on upgrade.
    profile: str = ""


def seal_key(signer: CertKey) -> bytes:
    """The HMAC key of the CA that signs now: derived from its private key, used for nothing else."""
    secret = signer.key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret)


def seal(key: bytes, leaf: SealedLeaf, *, not_before: datetime, not_after: datetime) -> str:
    """The annotation value: version, the window in Unix seconds, the HMAC."""
    window = (int(not_before.timestamp()), int(not_after.timestamp()))
    return f"{_VERSION} {window[0]} {window[1]} {_mac(key, leaf, window)}"


def open_seal(key: bytes, leaf: SealedLeaf, value: str | None) -> Sealed | None:
    """The sealed window when `value` is a seal of exactly `leaf` under `key`; None otherwise."""
    parts = _parts(value)
    if parts is None:
        return None
    window, mac = parts
    if not hmac.compare_digest(mac, _mac(key, leaf, window)):
        return None
    return _sealed(window)


def sealed_window(value: str) -> Sealed:
    """The window of a seal `seal` just made (so it is known to open): what open_seal would return for it,
    without computing its HMAC again."""
    parts = _parts(value)
    if parts is None:
        raise ValueError("not a seal")
    return _sealed(parts[0])


def _parts(value: str | None) -> tuple[tuple[int, int], str] | None:
    if not value or len(value) > _MAX_LENGTH:
        return None
    parts = value.split(" ")
    if len(parts) != 4 or parts[0] != _VERSION or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    return (int(parts[1]), int(parts[2])), parts[3]


# One Sealed (its two datetimes) for every leaf of a window: a pass issuing 100,000 leaves gives them a few
# hundred distinct seconds, and the reconciler's status keeps each leaf's end between passes (~0.15 KiB
# each when made per leaf). A window is two integers, each entry ~0.3 KiB.
REMEMBERED_WINDOWS = 4096


@functools.lru_cache(maxsize=REMEMBERED_WINDOWS)
def _sealed(window: tuple[int, int]) -> Sealed:
    return Sealed(datetime.fromtimestamp(window[0], UTC), datetime.fromtimestamp(window[1], UTC))


def _mac(key: bytes, leaf: SealedLeaf, window: tuple[int, int]) -> str:
    fields = (leaf.namespace.encode(), leaf.name.encode(), leaf.cert_pem, leaf.key_pem,
              ",".join(sorted(set(leaf.dns_names))).encode(), str(window[0]).encode(), str(window[1]).encode(),
              *((leaf.profile.encode(),) if leaf.profile else ()))
    mac = _keyed(key).copy()
    # Length-prefixed, so no two different field lists give the same message; one update of the whole
    # message (the same HMAC as one per piece, at a third of the Python calls).
    mac.update(b"".join(len(f).to_bytes(4, "big") + f for f in fields))
    return mac.hexdigest()


@functools.lru_cache(maxsize=8)
def _keyed(key: bytes) -> hmac.HMAC:
    """The keyed HMAC state, made once per key: a pass opens thousands of seals under one or two keys."""
    return hmac.new(key, digestmod=hashlib.sha256)
