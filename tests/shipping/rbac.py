"""RBAC as the apiserver's authorizer applies it, for checking recorded API calls against the manifests."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tests.shipping.support import Obj


@dataclass(frozen=True)
class Grant:
    namespace: str | None  # None: every namespace and cluster-scoped objects (a ClusterRoleBinding)
    group: str
    resource: str
    verb: str
    names: frozenset[str] | None  # None: any name


@dataclass(frozen=True)
class Call:
    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None

    @staticmethod
    def of(verb: str, qualified: str, namespace: str | None, name: str | None) -> Call:
        """From the emulator's request log, whose resources read `secrets` or `deployments.apps`."""
        resource, _, group = qualified.partition(".")
        return Call(verb, group, resource, namespace, name)


def grants_for(objects: list[Obj], *, namespace: str, account: str) -> list[Grant]:
    """Everything the bindings in `objects` give the service account `namespace/account`."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    found: list[Grant] = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or not _binds(binding, namespace, account):
            continue
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        found += list(_expand(role.get("rules") or [], scope))
    return found


def _binds(binding: Obj, namespace: str, account: str) -> bool:
    return any(s["kind"] == "ServiceAccount" and s.get("namespace") == namespace and s["name"] == account
               for s in binding.get("subjects") or [])


def _expand(rules: Iterable[Obj], scope: str | None) -> Iterator[Grant]:
    for rule in rules:
        names = frozenset(rule["resourceNames"]) if rule.get("resourceNames") else None
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    yield Grant(scope, group, resource, verb, names)


def allows(grant: Grant, call: Call) -> bool:
    if (grant.group, grant.resource, grant.verb) != (call.group, call.resource, call.verb):
        return False
    if grant.namespace is not None and grant.namespace != call.namespace:
        return False
    # A create, list or watch carries no object name when it is authorized, so a name-pinned rule
    # can never allow it (the apiserver behaves the same way).
    return grant.names is None or (call.name is not None and call.name in grant.names)


def authorized(grants: list[Grant], call: Call) -> bool:
    return any(allows(grant, call) for grant in grants)
