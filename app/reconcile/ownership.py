"""How objects the reconciler owns are marked, and the names of the objects in its own namespace.

Ownership is a label (so lists and watches can select exactly our objects and never cache every Secret
in the cluster) plus a role label saying which kind of object it is.
"""

from __future__ import annotations

from typing import Any, Literal

from app.injection.names import DOMAIN

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"  # the well-known label; RBAC docs rely on it
MANAGER = "tls-injector"
ROLE_LABEL = f"{DOMAIN}/role"
Role = Literal["leaf", "bundle", "ca", "webhook"]

WORKLOADS_ANNOTATION = f"{DOMAIN}/workloads"  # which workloads a leaf Secret serves, for people and events
ISSUER_ANNOTATION = f"{DOMAIN}/issuer"  # SHA-256 of the CA that signed the leaf
# On a leaf Secret: proof that its certificate and key passed the full check (app/pki/seal.py).
SEAL_ANNOTATION = f"{DOMAIN}/seal"
FORCE_RENEW_ANNOTATION = f"{DOMAIN}/force-renew"  # on a leaf Secret: re-issue it now (then removed)
FORCE_REPLACE_ANNOTATION = f"{DOMAIN}/force-replace"  # on the CA Secret: rotate to a new CA key

CA_SECRET = "tls-injector-ca"  # noqa: S105 - a Secret's name, not a password
# The client CA set (docs/mtls.md): its own Secret and trust state machine, rotating apart from the serving CA.
CLIENT_CA_SECRET = "tls-injector-client-ca"  # noqa: S105 - a Secret's name, not a password


def owned_selector(role: Role) -> str:
    return f"{MANAGED_BY_LABEL}={MANAGER},{ROLE_LABEL}={role}"


def owner_labels(role: Role) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGER, ROLE_LABEL: role}


def is_owned(obj: dict[str, Any] | None, role: Role) -> bool:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGER and labels.get(ROLE_LABEL) == role
