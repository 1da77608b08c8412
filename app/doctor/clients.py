"""Checks of the client certificates (docs/mtls.md): the client CA set, each workload's client leaf as an
mTLS server in its namespace would check it, and workloads asking for one where none can be issued.

The client CA Secret exists only once a workload asks for a client certificate; until then its absence is
no problem. Which client Secrets are wanted, and for which SPIFFE ID, is the reconciler's own discovery
(workloads.targets), so the doctor and the reconciler never disagree about a name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.doctor import ca
from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.injection import template_of
from tls_injector.pki import (
    UntrustedChain,
    bundle_certificates,
    extended_key_usages,
    load_certificates,
    renewal_time,
    uri_sans,
    verify_client,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.discover import Target, wants_pod_certificates
from tls_injector.reconcile.core.inputs import CLIENT_PREFIX
from tls_injector.reconcile.core.objects import secret_data

CATEGORY = "client certificates"
_RENEW = "kubectl -n {ns} annotate secret {name} " + names.FORCE_RENEW_ANNOTATION + "=now"


def check_client_ca(snap: Snapshot, wanted: list[Target]) -> list[Result]:
    """The serving CA's checks for the client CA set, when a workload asks for a client certificate or
    the set exists; else one line saying it is not needed yet."""
    asked = any(t.client_ids for t in wanted)
    if not asked and snap.ca_secrets.get(names.CLIENT_CA_SECRET) is None:  # absent, or unreadable and not needed
        return [ok(ca.CATEGORY, "the client CA Secret holds a usable CA set",
                   f"not needed: no workload asks for a client certificate ({names.CLIENT_CERT_ANNOTATION}); "
                   "the reconciler makes it when one does")]
    return ca.check_ca(snap, label="client CA", secret_name=names.CLIENT_CA_SECRET)


def _who(target: Target) -> str:
    return f"{target.namespace}/{target.client_secret} ({', '.join(str(w) for w in target.workloads)})"


def _problem(snap: Snapshot, target: Target) -> tuple[str, str]:
    """("error" | "warning" | "", what is wrong) with the target's client Secret."""
    secret = snap.secret(target.namespace, target.client_secret)
    if secret is None:
        return "error", "the Secret does not exist"
    if not own.is_owned(secret, "leaf"):
        return "error", "the Secret exists but tls-injector does not manage it"
    chain = load_certificates(secret_data(secret).get("tls.crt", b""))
    if not chain:
        return "error", "the Secret holds no certificate"
    return _leaf_problem(snap, target, chain)


def _leaf_problem(snap: Snapshot, target: Target, chain: list[Any]) -> tuple[str, str]:
    """As _problem, for the certificate chain the Secret holds: what an mTLS server of the namespace sees."""
    leaf = chain[0]
    usages = extended_key_usages(leaf)
    if usages != ["clientAuth"]:
        return "error", f"its extended key usage is {', '.join(usages) or 'none'}, not clientAuth only"
    [identity] = target.client_ids
    if uri_sans(leaf) != [identity]:
        return "error", f"it names {', '.join(uri_sans(leaf)) or 'no URI'}, not {identity}"
    bundle = snap.observed.bundles.get(target.namespace)
    trusted = bundle_certificates((bundle or {}).get("data") or {}, prefix=CLIENT_PREFIX)
    if not trusted:
        return "error", f"no {names.CLIENT_BUNDLE_KEY} in {target.namespace}'s {names.TRUST_BUNDLE_CONFIGMAP}"
    try:
        verify_client(leaf, chain[1:], trusted=trusted, now=snap.now)
    except UntrustedChain as e:
        return "error", f"servers verifying with {names.CLIENT_BUNDLE_KEY} refuse it: {e}"
    return _expiring(snap.now, leaf, chain[1] if len(chain) > 1 else None)


def _expiring(now: datetime, leaf: Any, issuer: Any) -> tuple[str, str]:
    """Past its renewal time: the reconciler's (renewal.renewal_time; cut short by its CA's end, later)."""
    due = renewal_time(leaf.not_valid_before_utc, leaf.not_valid_after_utc,
                       ca_end=issuer.not_valid_after_utc if issuer is not None else None)
    if now >= due:
        left = leaf.not_valid_after_utc - now
        return "warning", (f"it expires in {left.days} days and was due for renewal "
                           f"{(leaf.not_valid_after_utc - due).days} days before its end")
    return "", ""


def check_client_certificates(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every client certificate is issued, clientAuth only, and verifies against its namespace's client CAs"
    asking = [t for t in wanted if t.client_ids]
    errors: list[str] = []
    warnings: list[str] = []
    first: Target | None = None
    for target in asking:
        if target.client_refusal():
            errors.append(target.client_refusal())
            continue
        level, problem = _problem(snap, target)
        if level:
            (errors if level == "error" else warnings).append(f"{_who(target)}: {problem}")
            first = first or target
    renew = _RENEW.format(ns=first.namespace, name=first.client_secret) if first else ""
    hint = ("servers that require client certificates refuse these workloads' calls. The reconciler issues and "
            "renews client certificates each pass (a refused one: give the workloads one service account, or "
            f"each its own {names.SECRET_NAME_ANNOTATION}); check that it runs" + (f"; to force one now: {renew}"
                                                                                   if renew else ""))
    if errors:
        return error(CATEGORY, title, f"{len(errors)} of {len(asking)} refused or unusable",
                     details=errors + warnings, hint=hint)
    if warnings:
        return warning(CATEGORY, title, f"{len(warnings)} of {len(asking)} past their renewal", details=warnings,
                       hint=hint)
    return ok(CATEGORY, title, f"{len(asking)} client certificates")


def _asks(template: dict[str, Any]) -> bool:
    value = ((template.get("metadata") or {}).get("annotations") or {}).get(names.CLIENT_CERT_ANNOTATION)
    return isinstance(value, str) and value.strip().lower() == "true"


def check_pod_certificate_mode(snap: Snapshot) -> Result:
    """The PodCertificateRequest API has no usage choice for the requester: /mutate refuses a pod asking for
    a client certificate in the pod-certificate mode (docs/mtls.md), so such a workload's pods never start."""
    title = "no workload asks for a client certificate in the pod-certificate mode"
    if not snap.pod_certificates:
        return ok(CATEGORY, title, "pod certificates are not served here: such workloads get Secrets")
    refused = []
    for kind, obj in snap.observed.workloads:
        template = template_of(kind, obj) or {}
        if _asks(template) and wants_pod_certificates(template):
            meta = obj.get("metadata") or {}
            refused.append(f"{meta.get('namespace')}/{meta.get('name')} ({kind})")
    if refused:
        return error(CATEGORY, title, f"{len(refused)} workloads whose pods /mutate refuses", details=refused,
                     hint=f"a pod certificate's usages are the signer's, and {names.SIGNER_NAME} issues serving ones: "
                          f"set {names.MODE_ANNOTATION}: \"{names.MODE_SECRET}\" on those templates, or drop "
                          f"{names.CLIENT_CERT_ANNOTATION}. docs/mtls.md")
    return ok(CATEGORY, title)


def checks(snap: Snapshot, wanted: list[Target]) -> list[Result]:
    return [*check_client_ca(snap, wanted), check_client_certificates(snap, wanted), check_pod_certificate_mode(snap)]
