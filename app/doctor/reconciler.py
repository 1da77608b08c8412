"""Checks of the reconciler: its service account may make every call it makes, and a replica leads.

The permissions are asked with SubjectAccessReview for the reconciler's service account, not with
SelfSubjectAccessReview: the doctor usually runs as a person (often a cluster admin), and a
SelfSubjectAccessReview would answer for that person, not for the reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.names import SIGNER_NAME
from tls_injector.reconcile.native.podcerts import TRUST_BUNDLE_NAME

CATEGORY = "tls-injector reconciler"


@dataclass(frozen=True)
class Permission:
    verb: str
    group: str
    resource: str  # `resource/subresource` for a subresource
    scope: str  # "cluster", or "own" for the injector's namespace
    names: tuple[str, ...] = ()  # asked per name when the grant may be pinned to names


# (API group, resources, verbs, scope, names): every call the reconciler makes. tests/doctor checks this
# equals the shipped RBAC, which tests/shipping/test_rbac_from_code.py checks equals the calls the code
# makes. The pod-certificate ones are asked always: RBAC grants them whether or not the API is served.
_CALLS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str, str], ...] = (
    ("apps", ("deployments", "statefulsets", "daemonsets", "replicasets"), ("list", "watch"), "cluster", ""),
    ("batch", ("jobs", "cronjobs"), ("list", "watch"), "cluster", ""),
    ("", ("namespaces", "pods", "services"), ("list", "watch"), "cluster", ""),
    ("", ("nodes", "serviceaccounts"), ("get",), "cluster", ""),  # the signer's nodeUID/serviceAccountUID
    ("", ("secrets", "configmaps"), ("get", "list", "watch", "create", "update", "delete"), "cluster", ""),
    ("", ("events",), ("create",), "cluster", ""),
    ("certificates.k8s.io", ("podcertificaterequests",), ("get", "list", "watch"), "cluster", ""),
    ("certificates.k8s.io", ("podcertificaterequests/status",), ("update",), "cluster", ""),
    ("certificates.k8s.io", ("signers",), ("sign", "attest"), "cluster", "signer"),
    ("certificates.k8s.io", ("clustertrustbundles",), ("create",), "cluster", ""),
    ("certificates.k8s.io", ("clustertrustbundles",), ("get", "update"), "cluster", "trust-bundle"),
    ("admissionregistration.k8s.io", ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"),
     ("get", "update"), "cluster", "webhooks"),
    ("coordination.k8s.io", ("leases",), ("create",), "own", ""),
    ("coordination.k8s.io", ("leases",), ("get", "update"), "own", "lease"),
)


def required_permissions(webhook_configurations: tuple[str, ...], lease_name: str) -> list[Permission]:
    """Every permission the reconciler needs, with the object names the shipped RBAC pins."""
    pinned = {"": (), "signer": (SIGNER_NAME,), "trust-bundle": (TRUST_BUNDLE_NAME,),
              "webhooks": webhook_configurations, "lease": (lease_name,)}
    return [Permission(verb, group, resource, scope, pinned[names])
            for group, resources, verbs, scope, names in _CALLS for resource in resources for verb in verbs]


def check_access(snap: Snapshot) -> Result:
    account = f"{snap.settings.namespace}/{snap.settings.reconciler_account}"
    title = f"the reconciler's service account {account} may make its calls"
    if "access" in snap.errors:
        return warning(CATEGORY, title, f"not checked: {snap.errors['access']}",
                       hint="asking needs create on subjectaccessreviews.authorization.k8s.io (cluster admins have "
                            "it); pass --reconciler-service-account if the reconciler runs under another name")
    denied = [str(a) for a in snap.access if not a.allowed]
    if denied:
        return error(CATEGORY, title, f"{len(denied)} of {len(snap.access)} calls would be refused", details=denied,
                     hint="apply the shipped RBAC (manifests/base/rbac.yaml, through your overlay); each refused "
                          "call stops what needs it (the log shows Forbidden)")
    return ok(CATEGORY, title, f"{len(snap.access)} permissions")


def check_lease(snap: Snapshot) -> Result:
    name = f"{snap.settings.namespace}/{snap.settings.lease_name}"
    title = "a reconciler holds the leader Lease"
    hint = (f"no reconciler is working: kubectl -n {snap.settings.namespace} get deployment "
            f"{snap.settings.reconciler_account} and its logs; certificates are not renewed until one leads")
    if "lease" in snap.errors:
        return error(CATEGORY, title, f"cannot read Lease {name}: {snap.errors['lease']}",
                     hint="doctor needs get on leases.coordination.k8s.io in the injector's namespace")
    if snap.lease is None:
        return error(CATEGORY, title, f"Lease {name} does not exist: no reconciler has ever led", hint=hint)
    spec = snap.lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    renewed = _time(spec.get("renewTime"))
    duration = timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))
    if not holder or renewed is None:
        return error(CATEGORY, title, f"Lease {name} is not held", hint=hint)
    age = snap.now - renewed
    if age > duration:
        return error(CATEGORY, title, f"held by {holder}, but last renewed {_ago(age)} ago (the lease lasts "
                                      f"{int(duration.total_seconds())} s)", hint=hint)
    return ok(CATEGORY, title, f"held by {holder}, renewed {_ago(age)} ago")


def _time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def _ago(age: timedelta) -> str:
    seconds = max(0, int(age.total_seconds()))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


def checks(snap: Snapshot) -> list[Result]:
    return [check_access(snap), check_lease(snap)]


__all__ = ["Permission", "check_access", "check_lease", "checks", "required_permissions"]
