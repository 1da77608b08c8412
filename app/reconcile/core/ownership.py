"""How objects the reconciler owns are marked (the names themselves are in app/names.py).

Ownership is a label (so lists and watches can select exactly our objects and never cache every Secret
in the cluster) plus a role label saying which kind of object it is.
"""

from __future__ import annotations

from typing import Any, Literal

from tls_injector.names import MANAGED_BY_LABEL, MANAGER, ROLE_LABEL

Role = Literal["leaf", "bundle", "ca", "webhook", "intermediate", "intermediate-record", "federation-status"]


def owned_selector(role: Role) -> str:
    return f"{MANAGED_BY_LABEL}={MANAGER},{ROLE_LABEL}={role}"


def owner_labels(role: Role) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGER, ROLE_LABEL: role}


def is_owned(obj: dict[str, Any] | None, role: Role) -> bool:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGER and labels.get(ROLE_LABEL) == role
