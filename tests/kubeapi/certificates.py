"""The apiserver's checks on PodCertificateRequests and ClusterTrustBundles (certificates.k8s.io).

What a signer can get wrong, checked as the real registry does, so a status the emulator accepts is one
a 1.35+ apiserver accepts too:

- PodCertificateRequest ``/status``: at most one of the conditions Issued/Denied/Failed, status "True",
  with reason, message and lastTransitionTime; once one is set the whole status is immutable; Denied and
  Failed carry nothing but conditions; Issued needs ``certificateChain`` (CERTIFICATE PEM blocks, the
  first issued to the request's public key), ``notBefore``/``notAfter`` equal to the leaf's and
  ``notBefore`` within 5 minutes of the server's clock, a lifetime of 1 hour up to
  ``spec.maxExpirationSeconds``, and ``beginRefreshAt`` at least 10 minutes inside both ends.
- ClusterTrustBundle: a ``spec.signerName`` bundle is named ``<signer with / as :>:<suffix>``, an unsigned
  one is not; ``trustBundle`` holds only CA certificates, no duplicates.

Not checked: the ``sign`` / ``attest`` permissions (no authorization here: tests/shipping/rbac.py
compares the request log with the shipped roles) and the kubelet's side of PCR creation (the
proof of possession, the stub CSR's signature).
"""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

Cause = tuple[str, str, str]
_TERMINAL = ("Issued", "Denied", "Failed")
# The apiserver's cap on an issued PodCertificateRequest's certificateChain (100 KiB).
MAX_CERTIFICATE_CHAIN = 100 * 1024
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # metav1.Condition's reason
_NOT_BEFORE_SKEW = timedelta(minutes=5)
_REFRESH_MARGIN = timedelta(minutes=10)
_MIN_LIFETIME = timedelta(hours=1)
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)


def _invalid(field: str, detail: str) -> Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {detail}")


def validate(plural: str, obj: dict[str, Any], old: dict[str, Any] | None, *, now: datetime) -> list[Cause]:
    if plural == "clustertrustbundles":
        return _bundle(obj)
    if plural == "podcertificaterequests":
        return _request_create(obj) if old is None else _request_status(obj, old, now=now)
    return []


# ---- ClusterTrustBundle ------------------------------------------------------------------------------


def _bundle(obj: dict[str, Any]) -> list[Cause]:
    spec, name = obj.get("spec") or {}, obj["metadata"].get("name", "")
    signer = str(spec.get("signerName") or "")
    causes = []
    if signer and not name.startswith(signer.replace("/", ":") + ":"):
        causes.append(_invalid("metadata.name", f"{name!r}: ClusterTrustBundle for signerName {signer} must be "
                                                f"named with prefix {signer.replace('/', ':')}:"))
    if not signer and ":" in name:
        causes.append(_invalid("metadata.name", f"{name!r}: ClusterTrustBundle without signerName must not "
                                                f"have a signer-name prefix"))
    blocks = _blocks(str(spec.get("trustBundle") or "").encode())
    malformed = len(causes)
    for kind, der in blocks:
        if kind != "CERTIFICATE":
            causes.append(_invalid("spec.trustBundle", f"PEM block of type {kind!r}, only CERTIFICATE allowed"))
            continue
        try:
            cert = x509.load_der_x509_certificate(der)
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except (ValueError, x509.ExtensionNotFound):
            ca = False
        if not ca:
            causes.append(_invalid("spec.trustBundle", "every certificate must have basic constraints with CA:TRUE"))
    if len(causes) > malformed:  # a malformed block hides the missing and duplicate anchors, as in the apiserver
        return causes
    if not blocks:
        causes.append(_invalid("spec.trustBundle", "at least one trust anchor must be provided"))
    if len({der for _, der in blocks}) != len(blocks):
        causes.append(_invalid("spec.trustBundle", "duplicate trust anchor"))
    return causes


# ---- PodCertificateRequest ---------------------------------------------------------------------------


# The apiserver's bounds on a request's maxExpirationSeconds: an hour at least; at most 24 hours for the
# kubernetes.io signers and 91 days for any other.
_MIN_MAX_EXPIRATION, _KUBERNETES_MAX_EXPIRATION, _MAX_MAX_EXPIRATION = 3_600, 86_400, 7_862_400
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _request_create(obj: dict[str, Any]) -> list[Cause]:
    """ValidatePodCertificateRequestCreate: the pod, its service account and its node named and identified
    (an empty or ill-formed value is Invalid, not Required, as the apiserver reports it), the lifetime cap in
    range, and exactly one of the stub CSR and the (public key, proof of possession) pair."""
    spec = obj.get("spec") or {}
    causes = [] if spec.get("signerName") else [("FieldValueRequired", "spec.signerName", "Required value")]
    for name in ("podName", "serviceAccountName", "nodeName"):
        value = str(spec.get(name) or "")
        if not (len(value) <= 253 and _SUBDOMAIN.match(value)):
            causes.append(_invalid(f"spec.{name}", f"{value!r}: a lowercase RFC 1123 subdomain"))
    for name in ("podUID", "serviceAccountUID", "nodeUID"):
        if not spec.get(name):
            causes.append(_invalid(f"spec.{name}", "'': must not be empty"))
    seconds = spec.get("maxExpirationSeconds")
    if seconds is None:
        return [*causes, ("FieldValueRequired", "spec.maxExpirationSeconds", "Required value: must be set")]
    kubernetes = str(spec.get("signerName")).startswith("kubernetes.io/")
    most = _KUBERNETES_MAX_EXPIRATION if kubernetes else _MAX_MAX_EXPIRATION
    if not isinstance(seconds, int) or not _MIN_MAX_EXPIRATION <= seconds <= most:
        causes.append(_invalid("spec.maxExpirationSeconds", f"{seconds!r}: must be in the range "
                                                           f"[{_MIN_MAX_EXPIRATION}, {most}]"))
    if bool(spec.get("stubPKCS10Request")) == bool(spec.get("pkixPublicKey") and spec.get("proofOfPossession")):
        causes.append(_invalid("spec", "exactly one of (stubPKCS10Request) or (pkixPublicKey, proofOfPossession) "
                                       "must be set"))
    return causes


def default(plural: str, obj: dict[str, Any], *, version: str = "v1") -> None:
    """The registry's defaulting: a request's lifetime cap is 24 hours unless the kubelet asked otherwise.
    certificates.k8s.io/v1 has no `pkixPublicKey` or `proofOfPossession` (v1beta1's way to send the key):
    its decoder drops them as unknown fields, so a v1 request carrying only those has no key at all."""
    if plural == "podcertificaterequests" and isinstance(obj.get("spec"), dict):
        obj["spec"].setdefault("maxExpirationSeconds", 86_400)
        if version == "v1":
            obj["spec"].pop("pkixPublicKey", None)
            obj["spec"].pop("proofOfPossession", None)


def _request_status(obj: dict[str, Any], old: dict[str, Any], *, now: datetime) -> list[Cause]:
    if obj.get("spec") != old.get("spec"):
        return [_invalid("spec", "field is immutable")]
    new_status, old_status = obj.get("status") or {}, old.get("status") or {}
    causes = _conditions(new_status.get("conditions") or [])
    if causes:
        return causes
    if _terminal(old_status):
        return [] if new_status == old_status else [
            _invalid("status", "immutable after PodCertificateRequest is issued, denied, or failed")]
    state = _terminal(new_status)
    if state in ("Denied", "Failed"):
        extra = sorted(k for k in new_status if k != "conditions")
        return [_invalid("status", "non-condition status fields must be empty when denying or failing the "
                                   f"PodCertificateRequest: {extra}")] if extra else []
    if state == "Issued":
        return _issued(new_status, old.get("spec") or {}, now=now)
    return [] if new_status == old_status else [
        _invalid("status", 'status is immutable unless transitioning to "Issued", "Denied", or "Failed"')]


def _conditions(conditions: list[Any]) -> list[Cause]:
    causes, terminal = [], 0
    for i, cond in enumerate(conditions):
        where = f"status.conditions[{i}]"
        if not isinstance(cond, dict) or cond.get("type") not in _TERMINAL:
            causes.append(("FieldValueNotSupported", f"{where}.type", f"Unsupported value: supported values: "
                                                                     f"{', '.join(_TERMINAL)}"))
            continue
        terminal += 1
        if terminal > 1:
            causes.append(_invalid(f"{where}.type", 'at most one condition with type "Issued", "Denied", or "Failed"'))
        if cond.get("status") != "True":
            causes.append(("FieldValueNotSupported", f"{where}.status", 'Unsupported value: supported values: "True"'))
        if not _REASON.match(str(cond.get("reason") or "")) or len(str(cond.get("reason"))) > 1024:
            causes.append(_invalid(f"{where}.reason", "a CamelCase reason is required"))
        if not cond.get("lastTransitionTime"):
            causes.append(("FieldValueRequired", f"{where}.lastTransitionTime", "Required value"))
        if len(str(cond.get("message") or "")) > 32_768:
            causes.append(("FieldValueTooLong", f"{where}.message", "Too long: may not be more than 32768 bytes"))
    return causes


def _terminal(status: dict[str, Any]) -> str:
    conditions = status.get("conditions") or []
    found = [c.get("type") for c in conditions if isinstance(c, dict) and c.get("type") in _TERMINAL]
    return str(found[0]) if found else ""


def _issued(status: dict[str, Any], spec: dict[str, Any], *, now: datetime) -> list[Cause]:
    if len(str(status.get("certificateChain") or "")) > MAX_CERTIFICATE_CHAIN:
        return [("FieldValueTooLong", "status.certificateChain",
                 f"Too long: may not be more than {MAX_CERTIFICATE_CHAIN} bytes")]
    blocks = _blocks(str(status.get("certificateChain") or "").encode())
    if not blocks or any(kind != "CERTIFICATE" for kind, _ in blocks):
        return [_invalid("status.certificateChain", "must consist of one or more CERTIFICATE PEM blocks")]
    try:
        leaf = x509.load_der_x509_certificate(blocks[0][1])
        _ = [x509.load_der_x509_certificate(der) for _, der in blocks[1:]]
    except ValueError:
        return [_invalid("status.certificateChain", "does not parse as X.509")]
    if leaf.public_key() != _requested_key(spec):
        return [_invalid("status.certificateChain", "leaf certificate was not issued to the requested public key")]
    missing = [f for f in ("notBefore", "notAfter", "beginRefreshAt") if not status.get(f)]
    if missing:
        return [("FieldValueRequired", f"status.{f}", "Required value") for f in missing]
    not_before, not_after = _time(status["notBefore"]), _time(status["notAfter"])
    refresh = _time(status["beginRefreshAt"])
    checks = [
        (not_before == leaf.not_valid_before_utc, "status.notBefore", "must be the leaf certificate's NotBefore"),
        (abs(not_before - now) < _NOT_BEFORE_SKEW, "status.notBefore", "must be within 5 minutes of the server's time"),
        (not_after == leaf.not_valid_after_utc, "status.notAfter", "must be the leaf certificate's NotAfter"),
        (not_after - not_before >= _MIN_LIFETIME, "status.certificateChain", "lifetime must be >= 1 hour"),
        (not_after - not_before <= timedelta(seconds=int(spec.get("maxExpirationSeconds") or 86_400)),
         "status.certificateChain", "lifetime must be <= spec.maxExpirationSeconds"),
        (refresh >= not_before + _REFRESH_MARGIN, "status.beginRefreshAt", "must be >= notBefore + 10 minutes"),
        (refresh <= not_after - _REFRESH_MARGIN, "status.beginRefreshAt", "must be <= notAfter - 10 minutes"),
    ]
    return [_invalid(field, detail) for ok, field, detail in checks if not ok][:1]  # the apiserver stops at one


def _requested_key(spec: dict[str, Any]) -> Any:
    if spec.get("stubPKCS10Request"):
        return x509.load_der_x509_csr(base64.b64decode(spec["stubPKCS10Request"])).public_key()
    return serialization.load_der_public_key(base64.b64decode(spec.get("pkixPublicKey") or ""))


def _time(text: str) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def _blocks(pem: bytes) -> list[tuple[str, bytes]]:
    try:
        return [(m[1].decode(), base64.b64decode(b"".join(m[2].split()))) for m in _PEM_BLOCK.finditer(pem)]
    except ValueError:
        return [("INVALID", b"")]
