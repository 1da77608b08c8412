"""Checks of workloads' certificate profiles (docs/injection.md, "Certificate profiles"): the values refused
under the operator's bounds (given to doctor as the reconciler's own flags), certificates not yet issued with
their profile, and profiles asked for where they do not apply (pod certificates: the kubelet makes the key)."""

from __future__ import annotations

from tls_injector import names
from tls_injector.doctor.model import Result, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.injection import template_of
from tls_injector.injection.profile import Profile, parse_note
from tls_injector.pki import key_type_of, load_certificates
from tls_injector.reconcile.core.discover import Target, pod_mode
from tls_injector.reconcile.core.objects import secret_data

CATEGORY = "workloads"
_LISTED = 20  # details shown; the count says how many in all


def check_profiles_accepted(wanted: list[Target]) -> Result:
    title = "every certificate profile asked for is within the operator's bounds"
    refused = [t.profile_refusal() for t in wanted if t.profile_problems]
    if refused:
        return warning(CATEGORY, title, f"{len(refused)} of {len(wanted)} are issued with a default in place of a "
                                        "value asked for", details=refused[:_LISTED],
                       hint=f"{', '.join(names.PROFILE_ANNOTATIONS)} must lie within the reconciler's profile flags "
                            "(--min-duration, --max-duration, --min-renew-before, --allowed-key-algorithms; pass "
                            "them to doctor too), and workloads sharing a Secret must ask for one profile. "
                            "docs/injection.md")
    return ok(CATEGORY, title, f"{len(wanted)} certificates")


def check_profiles_applied(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every certificate has its profile's key algorithm and lifetime"
    behind = [f"{t.namespace}/{t.secret_name}: {why}" for t in wanted if (why := _behind(snap, t))]
    if behind:
        return warning(CATEGORY, title, f"{len(behind)} of {len(wanted)} are not yet issued with their profile",
                       details=behind[:_LISTED],
                       hint="the reconciler re-issues a certificate whose key algorithm differs, or that lives longer "
                            "than its profile, at its next pass; one that stays so means the reconciler is not "
                            "running or was given other bounds than doctor (`tls-injector reconcile --once` says)")
    return ok(CATEGORY, title, f"{len(wanted)} certificates")


def check_profiles_apply(snap: Snapshot) -> Result:
    title = "no certificate profile is asked for where it cannot apply"
    found = [f"{kind}/{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
             for kind, obj in snap.observed.workloads
             if (template := template_of(kind, obj)) is not None and _asks(template)
             and pod_mode(template) in (names.MODE_POD_CERTIFICATE, names.MODE_TRUST_ONLY)]
    if found:
        return warning(CATEGORY, title, f"{len(found)} ask for a profile in the pod-certificate or trust-only mode",
                       details=found[:_LISTED],
                       hint=f"a pod certificate's key is made by the kubelet ({names.POD_KEY_TYPE}) and its lifetime "
                            f"set by the signer; trust alone has no certificate. Remove the annotations, or use "
                            f"{names.MODE_ANNOTATION}: {names.MODE_SECRET}. docs/injection.md")
    return ok(CATEGORY, title, "none")


def _asks(template: dict[str, object]) -> bool:
    metadata = template.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return isinstance(annotations, dict) and any(key in annotations for key in names.PROFILE_ANNOTATIONS)


def _behind(snap: Snapshot, target: Target) -> str:
    """Why the stored certificate is not one of the target's profile ("" when it is, or none is stored)."""
    secret = snap.secret(target.namespace, target.secret_name)
    chain = load_certificates(secret_data(secret, keys=("tls.crt",)).get("tls.crt", b""))
    if not chain:
        return ""
    algorithm = key_type_of(chain[0].public_key())
    if algorithm != target.profile.key_algorithm:
        return f"its key is {algorithm or 'of another kind'}, its profile asks for {target.profile.key_algorithm}"
    recorded = parse_note(((secret or {}).get("metadata") or {}).get("annotations", {}).get(
        names.PROFILE_ANNOTATION, ""))
    if (recorded or Profile()) != target.profile:
        return f"issued for {(recorded or Profile()).note()}, its profile is {target.profile.note()}"
    return ""
