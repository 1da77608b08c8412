"""The signer `tls-injector.io/serving`, decided purely: a PodCertificateRequest and its pod in, a verdict out.

Issued when the pod the kubelet names exists with that UID, runs as the service account and on the node
the request says, that ServiceAccount and Node exist with the UIDs the request names, the pod is opted
in, and its workload maps to names; the certificate gets exactly the DNS names the workload's Secret
would get. Denied otherwise, with the reason a person needs. Requests for other signers, and requests
already Issued/Denied/Failed, are not ours to touch.

The ClusterTrustBundle holding the CA set is decided here too: one object for the signer, all the CAs of
the set in it (old and new together during a rotation), written only when its contents change.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.injection.workload import controller_of, pod_workload
from tls_injector.pki import (
    CaSet,
    CertKey,
    KeyRejected,
    dns_names_for_services,
    is_dns_label,
    issue_for_key,
    pod_cert_times,
    requested_key,
    served_by_kubernetes,
    service_name_problem,
    trust_bundle,
    vet_key_type,
    vet_service_names,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.discover import opted_in

Obj = dict[str, Any]
SIGNER_NAME = names.SIGNER_NAME
# The one bundle this signer publishes: `<signer, / as :>:<suffix>`, as the API requires of a signer's
# bundles. One object rather than one per CA, so a rotation's old-and-new set is replaced atomically.
TRUST_BUNDLE_NAME = names.CLUSTER_TRUST_BUNDLE  # pods project it by this name
_TERMINAL = ("Issued", "Denied", "Failed")
# The signer recognises no user annotation (names come from the workload, never from the pod author),
# so every key is unknown and denied, as the API asks of signers.
KNOWN_USER_ANNOTATIONS: frozenset[str] = frozenset()
_SHOWN = 80  # request values quoted in a message are cut here: kubectl shows the whole message
# The apiserver refuses an Issued status whose certificateChain is over 100 KiB: such a chain would be
# refused on every pass and the pod would never start, so the request is Denied with the reason instead.
# With at most MAX_SERVICES names (app/pki/names.py) a chain stays near 2 KiB; before that cap about 950
# service names reached the limit. The check keeps the rule by construction whatever the names.
MAX_CERTIFICATE_CHAIN = 100 * 1024


@dataclass(frozen=True)
class Issue:
    chain_pem: str
    not_before: datetime
    not_after: datetime
    begin_refresh_at: datetime
    dns_names: tuple[str, ...]
    workload: str


@dataclass(frozen=True)
class Deny:
    reason: str  # CamelCase, as metav1.Condition wants: UnsupportedKeyType is the API's own
    message: str
    failed: bool = False  # Failed (this signer cannot issue now) rather than Denied (it never will)


Verdict = Issue | Deny


def is_ours(request: Mapping[str, Any]) -> bool:
    """For this signer and not yet answered."""
    spec, status = request.get("spec") or {}, request.get("status") or {}
    answered = any(isinstance(c, dict) and c.get("type") in _TERMINAL for c in status.get("conditions") or [])
    return spec.get("signerName") == SIGNER_NAME and not answered


def decide(request: Mapping[str, Any], *, pod: Mapping[str, Any] | None, namespace_enabled: bool,
           signer: CertKey, now: datetime, node: Mapping[str, Any] | None, account: Mapping[str, Any] | None,
           cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN) -> Verdict:
    """Issue or deny one request of this signer. `pod` is the opted-in candidate named by spec.podName, None
    when there is none (the pod is gone, or was never opted in: either way nothing vouches for it). `node`
    and `account` are the Node spec.nodeName and the ServiceAccount spec.serviceAccountName name, read for
    this request, None when they do not exist."""
    spec = request.get("spec") or {}
    namespace = str((request.get("metadata") or {}).get("namespace") or "")
    refusal = (_check_pod(spec, pod, namespace_enabled) or _check_identities(spec, node, account)
               or _check_annotations(spec))
    if refusal:
        return refusal
    assert pod is not None  # _check_pod refuses a missing pod
    dns = _dns_names(pod, namespace, cluster_domain)
    if isinstance(dns, Deny):
        return dns
    try:
        key = requested_key(stub_pkcs10=_der(spec.get("stubPKCS10Request")), pkix=_der(spec.get("pkixPublicKey")))
        vet_key_type(key)
    except KeyRejected as e:
        return Deny("UnsupportedKeyType", str(e))
    try:
        times = pod_cert_times(now=now, max_expiration_seconds=int(spec.get("maxExpirationSeconds") or 86_400),
                               issuer_not_after=signer.cert.not_valid_after_utc)
    except ValueError as e:
        return Deny("SignerCannotIssue", str(e), failed=True)
    chain = issue_for_key(issuer=signer, public_key=key, dns_names=dns[1], times=times).decode()
    if len(chain) > MAX_CERTIFICATE_CHAIN:
        return Deny("CertificateTooLarge", f"the certificate for {len(dns[1])} DNS names would be {len(chain)} bytes, "
                                           f"over the {MAX_CERTIFICATE_CHAIN} the API accepts; list fewer names in "
                                           f"{names.SERVICE_NAMES_ANNOTATION}")
    return Issue(chain, times.not_before, times.not_after, times.begin_refresh_at, tuple(dns[1]), dns[0])


def status_update(request: Mapping[str, Any], verdict: Verdict, *, now: datetime) -> Obj:
    """The whole object to PUT to /status (its resourceVersion is the precondition)."""
    stamp = _stamp(now)
    if isinstance(verdict, Issue):
        condition = {"type": "Issued", "status": "True", "reason": "Issued", "lastTransitionTime": stamp,
                     "message": f"issued for workload {verdict.workload}: {', '.join(verdict.dns_names)}"[:1024]}
        status: Obj = {"conditions": [condition], "certificateChain": verdict.chain_pem,
                       "notBefore": _stamp(verdict.not_before), "notAfter": _stamp(verdict.not_after),
                       "beginRefreshAt": _stamp(verdict.begin_refresh_at)}
    else:
        kind = "Failed" if verdict.failed else "Denied"
        status = {"conditions": [{"type": kind, "status": "True", "reason": verdict.reason,
                                  "message": verdict.message[:1024], "lastTransitionTime": stamp}]}
    meta = request.get("metadata") or {}
    return {"apiVersion": request.get("apiVersion"), "kind": "PodCertificateRequest",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "resourceVersion": meta.get("resourceVersion")},
            "spec": request.get("spec"), "status": status}


def issued_chains(requests: list[Obj], *, now: datetime) -> list[bytes]:
    """Certificate chains of issued requests still valid: leaves in use, for the trust state machine."""
    chains = []
    for request in requests:
        status = request.get("status") or {}
        if status.get("certificateChain") and str(status.get("notAfter") or "") > _stamp(now):
            chains.append(str(status["certificateChain"]).encode())
    return chains


def trust_bundle_object(cas: CaSet, *, version: str, now: datetime) -> Obj:
    """The desired ClusterTrustBundle: every CA of the set (expired ones dropped), in a stable order."""
    pem = trust_bundle(cas.bundle(), now=now)[names.BUNDLE_KEY]
    return {"apiVersion": f"certificates.k8s.io/{version}", "kind": "ClusterTrustBundle",
            "metadata": {"name": TRUST_BUNDLE_NAME, "labels": own.owner_labels("bundle")},
            "spec": {"signerName": SIGNER_NAME, "trustBundle": pem}}


def bundle_write(existing: Obj | None, desired: Obj) -> Obj | None:
    """The body to create or replace with, None when the stored bundle already says it all.

    ValueError for a bundle of that name we did not make: whoever could write it holds `attest` on this
    signer, and overwriting their object blindly is not ours to do (the pass reports it instead).
    """
    if existing is None:
        return desired
    if not own.is_owned(existing, "bundle"):
        raise ValueError(f"ClusterTrustBundle {TRUST_BUNDLE_NAME} exists without the label "
                         f"{names.MANAGED_BY_LABEL}={names.MANAGER}; left untouched")
    if existing.get("spec") == desired["spec"]:
        return None
    meta = existing.get("metadata") or {}
    return {**desired, "metadata": {**desired["metadata"], "resourceVersion": meta.get("resourceVersion")}}


def _check_pod(spec: Mapping[str, Any], pod: Mapping[str, Any] | None, namespace_enabled: bool) -> Deny | None:
    if pod is None:  # the reconciler reads only opted-in candidates: absent means gone or never opted in
        return Deny("NotOptedIn", f"no opted-in pod {_shown(spec.get('podName'))} exists (label the pod "
                                  f"{names.INJECT_LABEL}=true, or its namespace {names.INJECT_LABEL}=enabled)")
    meta, pod_spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("uid") != spec.get("podUID"):
        return Deny("PodMismatch", f"pod {_shown(spec.get('podName'))} has another UID than the request's")
    account = pod_spec.get("serviceAccountName") or "default"
    if spec.get("serviceAccountName") != account or spec.get("nodeName") != pod_spec.get("nodeName"):
        return Deny("PodMismatch", "the request's service account or node is not the pod's")
    if not opted_in(meta.get("labels") or {}, namespace_enabled=namespace_enabled):
        return Deny("NotOptedIn", f"pod {_shown(meta.get('name'))} is not opted in to tls-injector "
                                  f"(label {names.INJECT_LABEL})")
    return None


def _check_identities(spec: Mapping[str, Any], node: Mapping[str, Any] | None,
                      account: Mapping[str, Any] | None) -> Deny | None:
    """The request names the node and service account by UID too: a Node or ServiceAccount deleted and
    re-created under the same name since the pod was bound is another identity, and is not vouched for."""
    for kind, field, obj, name in (("Node", "nodeUID", node, spec.get("nodeName")),
                                   ("ServiceAccount", "serviceAccountUID", account, spec.get("serviceAccountName"))):
        if obj is None:
            return Deny(f"{kind}Mismatch", f"{kind} {_shown(name)} does not exist")
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid or uid != spec.get(field):
            return Deny(f"{kind}Mismatch", f"{kind} {_shown(name)} has UID {_shown(uid)}, the request's "
                                           f"{field} is {_shown(spec.get(field))}")
    return None


def _check_annotations(spec: Mapping[str, Any]) -> Deny | None:
    given = spec.get("unverifiedUserAnnotations") or {}
    unknown = sorted(set(given) - KNOWN_USER_ANNOTATIONS) if isinstance(given, dict) else ["?"]
    if unknown:
        return Deny("UnknownUserAnnotations", f"this signer recognises no userAnnotations; remove "
                                              f"{_shown(', '.join(map(str, unknown)))}")
    return None


def _dns_names(pod: Mapping[str, Any], namespace: str, domain: str) -> tuple[str, list[str]] | Deny:
    """The names the workload's Secret would get: the same annotations, read the same way."""
    meta = pod.get("metadata")
    workload = pod_workload(meta if isinstance(meta, dict) else {})
    if not workload.name:
        return Deny("NoWorkload", "cannot tell which workload the pod belongs to (no owner, name or generateName)")
    peers = _peer_names(pod, namespace, domain)
    if not workload.asked:  # its own name, when that is a Service name; else none, and the pod starts all the
        own = [] if service_name_problem(workload.name) else [workload.name]  # same (docs/injection.md)
        if own and (why := served_by_kubernetes(workload.name, namespace)):  # as discover.service_names
            return Deny("InvalidNames", f"the workload's own name {workload.name}: {why}")
        return workload.name, sorted({*dns_names_for_services(own, namespace, cluster_domain=domain), *peers})
    checked = vet_service_names(workload.service_names, namespace=namespace)
    if checked.refused:
        return Deny("InvalidNames", f"{names.SERVICE_NAMES_ANNOTATION}: {checked.reason()}; a certificate names "
                                    f"only Services of its own namespace")
    return workload.name, sorted({*dns_names_for_services(checked.kept, namespace, cluster_domain=domain), *peers})


def _peer_names(pod: Mapping[str, Any], namespace: str, domain: str) -> list[str]:
    """A StatefulSet's pod: its exact per-pod names, `<pod>.<service>.<namespace>.svc[.<domain>]`, where the
    StatefulSet controller set spec.hostname to the pod's name and spec.subdomain to its governing Service.
    Each pod is issued its own name, never a wildcard: its key is its own. The signer answers from the pod
    alone and does not check that the Service selects it: any pod of the namespace may already name any
    Service of its namespace (service-names), so this grants nothing beyond the namespace."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    owner = controller_of(meta)
    if owner is None or owner.get("kind") != "StatefulSet" or not str(owner.get("apiVersion") or "").startswith(
            "apps/"):
        return []
    hostname, subdomain = spec.get("hostname"), spec.get("subdomain")
    if hostname != meta.get("name") or not is_dns_label(hostname) or not isinstance(subdomain, str) \
            or service_name_problem(subdomain) or served_by_kubernetes(subdomain, namespace):
        return []
    return [f"{hostname}.{name}" for name in dns_names_for_services([subdomain], namespace, cluster_domain=domain)]


def _der(value: object) -> bytes:
    if not isinstance(value, str) or not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _shown(value: object) -> str:
    text = repr(str(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"
