"""SubjectAccessReview: the RBAC authorizer's answer, computed from the Roles and bindings in the store.

What the real authorizer does for the cases tests need: a RoleBinding grants its Role (or ClusterRole)
in its own namespace, a ClusterRoleBinding grants a ClusterRole everywhere; subjects match by
ServiceAccount (`system:serviceaccount:<ns>:<name>`), User or Group; `*` matches any group, resource or
verb; `resourceNames` only allows requests that name one of them (so never a create or a list). No
aggregation, no non-resource URLs, and every other authorizer (Node, webhook) is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tests.kubeapi import errors, resources

if TYPE_CHECKING:
    from tests.kubeapi.store import Store

Obj = dict[str, Any]


def review(store: Store, body: Any) -> Obj:
    """The SubjectAccessReview `body` with its `status` filled in (nothing is stored, as in the real API)."""
    spec = body.get("spec") if isinstance(body, dict) else None
    attributes = spec.get("resourceAttributes") if isinstance(spec, dict) else None
    if not isinstance(attributes, dict) or not (spec.get("user") or spec.get("groups")):
        raise errors.bad_request("spec.resourceAttributes and spec.user or spec.groups are required")
    allowed = any(_allows(rule, attributes) for rule in _rules(store, spec, attributes.get("namespace") or None))
    reason = "allowed by the RBAC rules in the emulator" if allowed else ""
    return {**body, "metadata": body.get("metadata") or {},
            "status": {"allowed": allowed, **({"reason": reason} if reason else {})}}


def _rules(store: Store, spec: Obj, namespace: str | None) -> Iterator[Obj]:
    for binding in _objects(store, "clusterrolebindings"):
        if _binds(binding, spec):
            yield from _role_rules(store, binding["roleRef"], None)
    if namespace:
        for binding in _objects(store, "rolebindings"):
            if binding["metadata"].get("namespace") == namespace and _binds(binding, spec):
                yield from _role_rules(store, binding["roleRef"], namespace)


def _objects(store: Store, plural: str) -> list[Obj]:
    res = resources.lookup("rbac.authorization.k8s.io", "v1", plural)
    assert res is not None
    return [s.obj for s in store.objects(res)]


def _role_rules(store: Store, ref: Obj, namespace: str | None) -> Iterator[Obj]:
    kind = ref.get("kind")
    plural, scope = ("clusterroles", None) if kind == "ClusterRole" else ("roles", namespace)
    for role in _objects(store, plural):
        if role["metadata"]["name"] == ref.get("name") and role["metadata"].get("namespace") == scope:
            yield from role.get("rules") or []


def _binds(binding: Obj, spec: Obj) -> bool:
    user, groups = spec.get("user") or "", set(spec.get("groups") or [])
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "ServiceAccount" and user == f"system:serviceaccount:{subject.get('namespace')}:{name}":
            return True
        if (kind == "User" and name == user) or (kind == "Group" and name in groups):
            return True
    return False


def _allows(rule: Obj, attributes: Obj) -> bool:
    def matches(field: str, value: str) -> bool:
        listed = rule.get(field) or []
        return "*" in listed or value in listed

    resource = attributes.get("resource") or ""
    if attributes.get("subresource"):  # RBAC names a subresource `pods/status`
        resource = f"{resource}/{attributes['subresource']}"
    if not (matches("apiGroups", attributes.get("group") or "") and matches("verbs", attributes.get("verb") or "")
            and matches("resources", resource)):
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes.get("name") in names


def authorize(store: Store, user: str, *, verb: str, res: resources.Resource, namespace: str | None,
              name: str | None) -> None:
    """Raise the apiserver's 403 unless the RBAC in the store lets `user` make this request (a create, a
    list or a watch names no object to RBAC)."""
    attributes = {"verb": verb, "group": res.group, "resource": res.plural, "namespace": namespace or "",
                  "name": "" if verb in ("create", "list", "watch", "deletecollection") else (name or "")}
    if any(_allows(rule, attributes) for rule in _rules(store, {"user": user}, namespace)):
        return
    target = f'{res.qualified} "{name}"' if attributes["name"] else res.qualified
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    raise errors.ApiError(403, "Forbidden", f'{target} is forbidden: User "{user}" cannot {verb} resource '
                                            f'"{res.plural}" in API group "{res.group}"{where}',
                          {"name": name or "", "kind": res.plural, **({"group": res.group} if res.group else {})})
