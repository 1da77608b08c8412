"""Whether a stored certificate must be (re)issued, and why. Pure: the time and the CA set are inputs.

Defaults follow the External Secrets proposal's table: a CA lives a year and is replaced 60 days before
it ends, a leaf lives 90 days and is replaced 35 days before it ends. 35 days on a 90-day leaf leaves
more than a month of retries if renewal keeps failing, and a leaf never outlives its CA (it is capped),
so the CA's 60 days must exceed the leaf's 35 for leaves to move to the new CA before the old one ends.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm

from tls_injector.pki.certs import BACKDATE, LEAF_VALIDITY, CertKey, fingerprint, key_matches, load_certificates
from tls_injector.pki.keys import KeyType, PrivateKey, key_from_pem, key_type_of
from tls_injector.pki.seal import REMEMBERED_WINDOWS, Sealed
from tls_injector.pki.verify import UntrustedChain, a_host_for, dns_sans, verify_client, verify_nameless, verify_server

CA_LOOKAHEAD = timedelta(days=60)
LEAF_LOOKAHEAD = timedelta(days=35)
# A certificate's times are whole seconds, and `not_before` is backdated (BACKDATE) from the moment of issue:
# one issued for `duration` spans duration + BACKDATE, give or take a second. Only a span longer than that by
# more than this slack is "longer than asked" (a shorter one is a leaf capped at its CA's end, or a profile
# that grew: it is kept, and the next renewal issues the new duration).
_SPAN_SLACK = timedelta(minutes=1)

RenewalReason = Literal[
    "missing",  # no certificate or no key stored
    "unparsable",  # stored bytes are not a PEM certificate / private key
    "key-mismatch",  # the key does not belong to the certificate
    "not-a-ca",  # a CA slot holds a certificate that cannot sign
    "not-yet-valid",  # not_before is in the future (issued by a clock running ahead)
    "expiring",  # ends within the lookahead (or has ended)
    "sans-changed",  # the DNS names differ from the desired ones
    "untrusted-issuer",  # does not chain to any currently trusted CA
    "ca-rotated",  # chains to a trusted CA, but not to the one now signing
    "profile-changed",  # its key algorithm is not the one asked for, or it lives longer than asked
]
RENEWAL_REASONS: tuple[RenewalReason, ...] = RenewalReason.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Decision:
    """`renew` with its `reason`; when kept, `due` is when the certificate will next need renewal."""

    renew: bool
    reason: RenewalReason | None = None
    due: datetime | None = None

    @staticmethod
    def because(reason: RenewalReason) -> Decision:
        return Decision(renew=True, reason=reason)

    @staticmethod
    def keep(due: datetime) -> Decision:
        return Decision(renew=False, due=due)


@dataclass(frozen=True)
class _Parsed:
    certs: list[x509.Certificate]
    key: PrivateKey


def leaf_renewal(
    *,
    cert_pem: bytes | None,
    key_pem: bytes | None,
    desired_dns: Sequence[str],
    trusted: Sequence[x509.Certificate],
    now: datetime,
    lookahead: timedelta = LEAF_LOOKAHEAD,
    issuer: x509.Certificate | None = None,
    client: bool = False,
    key_type: KeyType | None = None,
    duration: timedelta | None = None,
) -> Decision:
    """Decide for a serving leaf (`tls.crt` = leaf + intermediates, `tls.key`); `client` for mTLS client certs.

    `trusted` are the CAs in the trust bundle; `issuer`, when given, is the CA that signs new leaves:
    a leaf that verifies but was signed by another (phasing-out) CA is renewed with "ca-rotated". No
    `desired_dns` for a serving leaf: one that names nothing is wanted (a workload no Service selects).
    With `key_type` or `duration` (the workload's profile), a leaf of another key algorithm, or living
    longer than `duration`, is renewed with "profile-changed"; with `duration`, a leaf its CA's end cut
    short is renewed at the same share of the life it got (`granted_renew_before`).
    """
    parsed = _parse(cert_pem, key_pem)
    if isinstance(parsed, Decision):
        return parsed
    leaf, intermediates = parsed.certs[0], parsed.certs[1:]
    ca_end = _issuer_end(leaf, [*intermediates[:1], *([issuer] if issuer is not None else []), *trusted])
    lookahead = granted_renew_before(leaf.not_valid_before_utc, leaf.not_valid_after_utc, lookahead=lookahead,
                                     duration=duration, ca_end=ca_end)
    early = _timing(leaf, now=now, lookahead=lookahead) or _profile_changed(leaf, key_type, duration)
    if early is not None:
        return early
    if sorted(set(dns_sans(leaf))) != sorted(set(desired_dns)):
        return Decision.because("sans-changed")
    try:
        chain = _verify(leaf, intermediates, trusted=trusted, desired_dns=desired_dns, now=now, client=client)
    except UntrustedChain:
        return Decision.because("untrusted-issuer")
    if issuer is not None and fingerprint(chain[1]) != fingerprint(issuer):
        return Decision.because("ca-rotated")
    return Decision.keep(leaf.not_valid_after_utc - lookahead)  # lookahead as granted (above)


def ca_renewal(
    *, cert_pem: bytes | None, key_pem: bytes | None, now: datetime, lookahead: timedelta = CA_LOOKAHEAD
) -> Decision:
    """Decide for an operator-managed CA (`tls.crt` may carry its issuers, `tls.key` its key)."""
    parsed = _parse(cert_pem, key_pem)
    if isinstance(parsed, Decision):
        return parsed
    if not _can_sign(parsed.certs[0]):
        return Decision.because("not-a-ca")
    timing = _timing(parsed.certs[0], now=now, lookahead=lookahead)
    return timing or Decision.keep(parsed.certs[0].not_valid_after_utc - lookahead)


def load_user_ca(cert_pem: bytes, key_pem: bytes, *, now: datetime) -> CertKey:
    """A user-provided CA (certificate first, then optionally its issuers) with its key, checked.

    ValueError with a message a person can act on when it is not a usable CA at `now`.
    """
    parsed = _parse(cert_pem, key_pem)
    if isinstance(parsed, Decision):
        raise ValueError(_USER_CA_ERRORS.get(parsed.reason or "missing", "the CA cannot be used"))
    cert, chain = parsed.certs[0], parsed.certs[1:]
    if not _can_sign(cert):
        raise ValueError("the certificate is not a CA (basic constraints CA:TRUE and keyCertSign are required)")
    if now >= cert.not_valid_after_utc:
        raise ValueError(f"the CA expired at {cert.not_valid_after_utc.isoformat()}")
    if now < cert.not_valid_before_utc:
        raise ValueError(f"the CA is not valid before {cert.not_valid_before_utc.isoformat()}")
    _check_chain_links([cert, *chain])
    return CertKey(cert, parsed.key, tuple(chain))


_USER_CA_ERRORS: dict[RenewalReason, str] = {
    "missing": "both a CA certificate and its private key are required",
    "unparsable": "the CA certificate or private key is not valid PEM (PKCS#8, PKCS#1 or SEC1 keys)",
    "key-mismatch": "the private key does not belong to the CA certificate (the first one in the PEM)",
}


def _parse(cert_pem: bytes | None, key_pem: bytes | None) -> _Parsed | Decision:
    if not cert_pem or not key_pem or not cert_pem.strip() or not key_pem.strip():
        return Decision.because("missing")
    try:
        certs = load_certificates(cert_pem)
        key = key_from_pem(key_pem)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return Decision.because("unparsable")
    if not certs:
        return Decision.because("unparsable")
    if not key_matches(certs[0], key):
        return Decision.because("key-mismatch")
    return _Parsed(certs, key)


def sealed_leaf_renewal(sealed: Sealed, *, now: datetime, lookahead: timedelta = LEAF_LOOKAHEAD,
                        duration: timedelta | None = None, ca_end: datetime | None = None) -> Decision:
    """Decide for a leaf whose seal opened (app/pki/seal.py): the seal stands for everything `leaf_renewal`
    checks but the time (the key algorithm included: a seal is made for one), so only the sealed window is
    left to judge. `ca_end`: when the CA that signed it ends (a seal opens only with its signer's key)."""
    lookahead = granted_renew_before(sealed.not_before, sealed.not_after, lookahead=lookahead, duration=duration,
                                     ca_end=ca_end)
    timing = _window(sealed.not_before, sealed.not_after, now=now, lookahead=lookahead)
    if timing is None and longer_than(sealed.not_before, sealed.not_after, duration):
        return Decision.because("profile-changed")
    return timing or Decision.keep(sealed.not_after - lookahead)


def granted_renew_before(not_before: datetime, not_after: datetime, *, lookahead: timedelta,
                         duration: timedelta | None, ca_end: datetime | None) -> timedelta:
    """The renew-before of a certificate issued for `duration` under a CA that ends at `ca_end`.

    A leaf never outlives its CA (certs.issue_leaf caps it at its issuer's end), so under a CA that ends
    sooner than `duration` the leaf gets less life than asked. Judged by the whole renew-before it could be
    due the moment it is issued (8760h asks ~142 days before the end; a CA 100 days from its end grants 100)
    and be issued again at every pass, each time with the same end. So a leaf cut short by its CA's end (it
    ends when the CA does) is renewed at the share of the life it got that the profile asks of a whole one:
    renew-before scaled by granted / asked. The profile bounds renew-before to two thirds of the duration
    (injection/profile.py), so such a leaf is used for at least a third of the life it got, never renewed at
    issue. Any other leaf keeps `lookahead` as it is: one shorter than asked for another reason (a profile
    that grew, a stale one) is renewed as before, at once when its time left is under renew-before.
    """
    if duration is None or ca_end is None or not_after < ca_end:
        return lookahead
    granted = not_after - not_before - BACKDATE  # not_before is backdated from the moment of issue
    if granted >= duration:
        return lookahead
    return max(timedelta(0), lookahead * (granted / duration))


# When leaves of one window and profile are due is one datetime for them all (the status keeps one per leaf
# between passes; seal.REMEMBERED_WINDOWS says why a few thousand windows cover a cluster's issues).
@functools.lru_cache(maxsize=REMEMBERED_WINDOWS)
def renewal_time(not_before: datetime, not_after: datetime, *, ca_end: datetime | None,
                 lookahead: timedelta = LEAF_LOOKAHEAD, duration: timedelta | None = LEAF_VALIDITY) -> datetime:
    """When a leaf of these times is due for renewal under its profile, as `leaf_renewal` decides: for what
    the status, `doctor` and the page say of it. `ca_end`: when its issuer ends."""
    return not_after - granted_renew_before(not_before, not_after, lookahead=lookahead, duration=duration,
                                            ca_end=ca_end)


def _issuer_end(leaf: x509.Certificate, candidates: Sequence[x509.Certificate]) -> datetime | None:
    """When the CA the leaf names as its issuer ends: the first of `candidates` (what tls.crt carries after
    it, the signer, the trusted CAs) of that name. Unverified here, but only when it is renewed hangs on it:
    everything else is checked after, the chain verified."""
    return next((c.not_valid_after_utc for c in candidates if c.subject == leaf.issuer), None)


def _profile_changed(leaf: x509.Certificate, key_type: KeyType | None, duration: timedelta | None) -> Decision | None:
    """Renew a leaf of another key algorithm than the profile's, or living longer than its duration."""
    if key_type is not None and key_type_of(leaf.public_key()) != key_type:
        return Decision.because("profile-changed")
    if longer_than(leaf.not_valid_before_utc, leaf.not_valid_after_utc, duration):
        return Decision.because("profile-changed")
    return None


def longer_than(not_before: datetime, not_after: datetime, duration: timedelta | None) -> bool:
    """A certificate spanning these times lives longer than one issued now for `duration` would."""
    return duration is not None and not_after - not_before > duration + BACKDATE + _SPAN_SLACK


def _timing(cert: x509.Certificate, *, now: datetime, lookahead: timedelta) -> Decision | None:
    return _window(cert.not_valid_before_utc, cert.not_valid_after_utc, now=now, lookahead=lookahead)


def _window(not_before: datetime, not_after: datetime, *, now: datetime, lookahead: timedelta) -> Decision | None:
    if now < not_before:
        return Decision.because("not-yet-valid")
    # At now + lookahead, like cert-controller: renew while the old one still has `lookahead` to live.
    if now + lookahead >= not_after:
        return Decision.because("expiring")
    return None


def _verify(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    *,
    trusted: Sequence[x509.Certificate],
    desired_dns: Sequence[str],
    now: datetime,
    client: bool,
) -> list[x509.Certificate]:
    if client:
        return verify_client(leaf, intermediates, trusted=trusted, now=now)
    if not desired_dns:  # its SANs are none (checked before): nothing to verify a name for
        return verify_nameless(leaf, intermediates, trusted=trusted, now=now)
    # The SANs equal the desired names (checked before), and the verifier applies name constraints to
    # every SAN whatever name is asked, so one verification stands for all of them.
    return verify_server(leaf, intermediates, trusted=trusted, dns_name=a_host_for(desired_dns), now=now)


def _can_sign(cert: x509.Certificate) -> bool:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return constraints.ca  # no key usage extension: any usage allowed (RFC 5280 4.2.1.3)
    return constraints.ca and usage.key_cert_sign


def _check_chain_links(certs: Sequence[x509.Certificate]) -> None:
    for child, parent in itertools.pairwise(certs):
        try:
            child.verify_directly_issued_by(parent)
        except Exception as e:  # InvalidSignature, ValueError, TypeError: all mean "not its issuer"
            raise ValueError(f"{child.subject.rfc4514_string()} is not issued by the next certificate "
                             f"in the PEM ({parent.subject.rfc4514_string()})") from e
