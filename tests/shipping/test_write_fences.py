"""A fence for every write our accounts hold: every shipped install (the kustomize renderings of the base,
the example overlay and the base with each component, each with its bootstrap; the chart with default,
example and federation values) is read for its Roles, ClusterRoles and bindings, and for every write verb
(create, update, patch, delete, deletecollection) on every resource that any service account of
tls-injector holds, the same install must ship a ValidatingAdmissionPolicy, bound to Deny, that judges
that write by that account (its resource rules cover the resource and the operation, and its
matchConditions admit a request from that account), or docs/security.md ("Every write our accounts
hold") must say in its table why none is needed. The table is parsed from the doc, and every line of it
must name a write that is held and not fenced, so the two cannot drift.

tests/cluster/test_write_fences.py has each account's token try the forbidden variants on a real
kube-apiserver.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.shipping.helm import example_values
from tests.shipping.rbac import grants_for
from tests.shipping.support import ROOT, Obj, of_kind, render, render_with_components
from tests.shipping.test_reconciler_policy import ENV, _covers, cel_data
from tls_injector.rules.cel import EvalError

NS = "tls-injector"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# The admission operation each verb is judged as (a patch is an UPDATE; a deletecollection is judged one
# DELETE per object it removes).
OPERATION = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE",
             "deletecollection": "DELETE"}
CLUSTER_SCOPED = {"namespaces", "nodes", "clustertrustbundles", "mutatingwebhookconfigurations",
                  "validatingwebhookconfigurations", "certificatesigningrequests", "clusterroles",
                  "clusterrolebindings", "persistentvolumes", "customresourcedefinitions",
                  "validatingadmissionpolicies", "validatingadmissionpolicybindings"}
DOC = ROOT / "docs" / "security.md"
SECTION = "## Every write our accounts hold"


def _chart(*args: str) -> list[Obj]:
    from tests.shipping.test_chart import template

    return template(*args)


def _chart_role(role: str) -> list[Obj]:
    from tests.shipping.test_chart import template, values

    return template(*values(federation={"role": role}))


def _bootstrap() -> list[Obj]:
    return render(ROOT / "certs-bootstrap")


INSTALLS: dict[str, Callable[[], list[Obj]]] = {
    "kustomize base": lambda: render(ROOT / "manifests/base") + _bootstrap(),
    "kustomize example overlay": lambda: render(ROOT / "manifests/overlays/example")
    + render(ROOT / "manifests/overlays/example/bootstrap"),
    "kustomize base + member": lambda: render_with_components("manifests/base", "manifests/components/member")
    + _bootstrap(),
    "kustomize base + hub": lambda: render_with_components("manifests/base", "manifests/components/hub")
    + _bootstrap(),
    "kustomize base + admission-policy": lambda: render_with_components(
        "manifests/base", "manifests/components/admission-policy") + _bootstrap(),
    "chart default": _chart,
    "chart example values": lambda: _chart(*example_values()),
    "chart member": lambda: _chart_role("member"),
    "chart hub": lambda: _chart_role("hub"),
}


@dataclass(frozen=True)
class Held:
    account: str
    group: str
    resource: str  # with its subresource: podcertificaterequests/status
    verb: str
    namespace: str | None  # None: every namespace (a ClusterRoleBinding)

    @property
    def key(self) -> tuple[str, str, str]:
        """As the doc's table names it: account, `group/resource` (core: `resource`), verb."""
        return self.account, (f"{self.group}/{self.resource}" if self.group else self.resource), self.verb


def accounts(objects: list[Obj]) -> set[str]:
    return {s["name"] for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
            for s in b.get("subjects") or [] if s["kind"] == "ServiceAccount" and s.get("namespace") == NS}


def held_writes(objects: list[Obj]) -> set[Held]:
    """Every write verb a service account of tls-injector holds; `*` as a verb is every write."""
    found = set()
    for account in accounts(objects):
        for grant in grants_for(objects, namespace=NS, account=account):
            verbs = WRITE_VERBS if grant.verb == "*" else (grant.verb,) if grant.verb in WRITE_VERBS else ()
            found |= {Held(account, grant.group, grant.resource, v, grant.namespace) for v in verbs}
    return found


def _admission_request(held: Held) -> Obj:
    """The request the apiserver would build for `held`, on an object of no particular shape."""
    resource, _, sub = held.resource.partition("/")
    namespace = "" if resource in CLUSTER_SCOPED else held.namespace or "team-a"
    subject = {"apiVersion": "v1", "kind": "Object", "metadata": {"name": "x", "namespace": namespace}}
    operation = OPERATION[held.verb]
    return {"uid": "0", "resource": {"group": held.group, "version": "v1", "resource": resource},
            **({"subResource": sub} if sub else {}), "name": "x", "namespace": namespace, "operation": operation,
            "userInfo": {"username": f"system:serviceaccount:{NS}:{held.account}",
                         "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]},
            "object": None if operation == "DELETE" else subject,
            "oldObject": None if operation == "CREATE" else subject, "dryRun": False}


def _judges(policy: Obj, held: Held) -> bool:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    if not any(_covers(r["apiGroups"], held.group) and _covers(r["resources"], held.resource)
               and _covers(r["operations"], OPERATION[held.verb]) for r in rules):
        return False
    data: dict[str, Any] = cel_data(_admission_request(held))
    verdicts = [ENV.compile_bool(c["expression"]).evaluate(data) for c in policy["spec"].get("matchConditions") or []]
    # A condition that cannot be evaluated here (it reads the object's fields) does not count as judging
    # every such write: the fence must hold for any object.
    return all(v is True and not isinstance(v, EvalError) for v in verdicts)


def fences(objects: list[Obj], held: Held) -> list[str]:
    """The policies of `objects`, bound with Deny, that judge `held`."""
    denied = {b["spec"]["policyName"] for b in of_kind(objects, "ValidatingAdmissionPolicyBinding")
              if "Deny" in b["spec"].get("validationActions", [])}
    return [p["metadata"]["name"] for p in of_kind(objects, "ValidatingAdmissionPolicy")
            if p["metadata"]["name"] in denied and _judges(p, held)]


def unfenced(objects: list[Obj]) -> set[Held]:
    return {h for h in held_writes(objects) if not fences(objects, h)}


def documented() -> dict[tuple[str, str, str], str]:
    """The doc's table: (account, resource, verb) -> why no policy is needed."""
    text = DOC.read_text()
    assert SECTION in text, f"docs/security.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "the section's table has no rows"
    found = {}
    for row in rows:
        account, resource, verbs, why = (cell.strip() for cell in row.strip().strip("|").split("|", 3))
        assert why, row
        for verb in re.findall(r"`([a-z]+)`", verbs):
            found[(account.strip("`"), resource.strip("`"), verb)] = why
    return found


def _describe(helds: Iterable[Held]) -> list[str]:
    return sorted(f"{h.account}: {h.verb} {h.key[1]}" + (f" in {h.namespace}" if h.namespace else "")
                  for h in helds)


@pytest.mark.parametrize("install", INSTALLS)
def test_every_write_our_accounts_hold_is_fenced_by_a_policy_or_said_needless_in_the_doc(install: str) -> None:
    objects = INSTALLS[install]()
    held = held_writes(objects)
    assert held, f"{install}: no write found (the renderer lost the RBAC)"
    lines = documented()
    missing = [h for h in unfenced(objects) if h.key not in lines]
    assert not missing, (f"{install}: writes with no shipped policy and no line in docs/security.md "
                         f"({SECTION!r}):\n" + "\n".join(_describe(missing)))


def test_every_line_of_the_doc_names_a_write_that_is_held_and_not_fenced() -> None:
    open_writes = {h.key for install in INSTALLS.values() for h in unfenced(install())}
    stale = sorted(set(documented()) - open_writes)
    assert not stale, f"docs/security.md ({SECTION!r}) names writes no install holds unfenced: {stale}"


def test_the_writes_item_2_found_open_are_fenced_now() -> None:
    """The webhook configurations and the signer's bundle: held by the reconciler and the bootstrap Job,
    each judged by its policy."""
    objects = INSTALLS["kustomize base"]()
    judged = {h.key: fences(objects, h) for h in held_writes(objects)}
    for account in ("tls-injector-reconciler", "tls-injector-bootstrap"):
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            assert judged[(account, f"admissionregistration.k8s.io/{kind}", "update")] == [
                "tls-injector.webhook-configurations"]
    assert judged[("tls-injector-reconciler", "certificates.k8s.io/clustertrustbundles", "create")] == [
        "tls-injector.trust-bundle-reach"]


def test_the_fence_fails_without_the_policies_and_on_a_wildcard_verb() -> None:
    """The check can fail: drop the cluster-objects policies and the webhook configurations' updates are
    open again; a Role granting `*` on pods to an account of ours opens every write verb on pods."""
    objects = [o for o in INSTALLS["kustomize base"]() if not o["metadata"]["name"].startswith(
        ("tls-injector.webhook-configurations", "tls-injector.trust-bundle-reach"))]
    opened = {h.key for h in unfenced(objects)} - set(documented())
    assert ("tls-injector-reconciler", "admissionregistration.k8s.io/validatingwebhookconfigurations",
            "update") in opened
    assert ("tls-injector-bootstrap", "admissionregistration.k8s.io/mutatingwebhookconfigurations",
            "update") in opened
    objects += [
        {"kind": "Role", "metadata": {"name": "wide", "namespace": NS},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "wide", "namespace": NS},
         "roleRef": {"kind": "Role", "name": "wide"},
         "subjects": [{"kind": "ServiceAccount", "name": "tls-injector", "namespace": NS}]},
    ]
    assert {h.verb for h in unfenced(objects) if h.resource == "pods"} == set(WRITE_VERBS)
