"""The exported ValidatingAdmissionPolicies and CRD rules agree with the webhook, and are valid objects.

Agreement is proven by evaluating the exported CEL with the same CEL library the way the apiserver
does: policy variables over `object`/`oldObject`, then each validation with `variables`; a false or
an error fails it (failurePolicy Fail); the binding's action decides Deny or Warn.
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.rules_matrix import (
    ENABLED_NAMESPACE_TRANSITIONS,
    EXAMPLE_CRD,
    EXAMPLE_RULES,
    NAMESPACE_TRANSITIONS,
    OFF,
    SIDECAR_MATRIX,
    WORKLOAD_KINDS,
    WORKLOAD_TRANSITIONS,
    X,
    cronjob,
    namespace,
    sei_node,
    templated,
    workload,
)
from tests.shipping.test_webhooks import matches
from tests.support.reviews import answer, review
from tls_injector.cli import main
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.rules import SCOPE_ENABLED_NAMESPACES, export_documents, make_validate_handler
from tls_injector.rules.cel import Environment, EvalError, to_cel
from tls_injector.rules.export import EXCEPTION_GRANTED, guess_resource

RULES = load_rule_set(EXAMPLE_RULES)
VALIDATE = make_validate_handler(RULES)
VALIDATE_ENABLED = make_validate_handler(RULES, SCOPE_ENABLED_NAMESPACES)
POLICIES = export_documents(RULES, fmt="vap")
# The authorizer is the apiserver's (RBAC); here its check stands as a bool variable, `granted`, so the
# rest of the expression is evaluated by the same library (tests/cluster/test_exceptions.py asks real RBAC).
VAP_ENV = Environment(["object", "oldObject", "variables", "granted"])
CRD_ENV = Environment(["self", "oldSelf"])
RESOURCES = {"Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets",
             "SeiNode": "seinodes", "CronJob": "cronjobs", "Namespace": "namespaces"}
PLAIN_NAMESPACE = {"kubernetes.io/metadata.name": "shop"}
ENABLED_NAMESPACE = PLAIN_NAMESPACE | {"tls-injector.io/inject": "enabled"}


def webhook(old: dict[str, Any], new: dict[str, Any], *, enabled: bool = False) -> tuple[bool, bool]:
    """(allowed, warned) from /validate, or from /validate/enabled-namespace when the object lives in an
    enabled namespace (the shipped entries send it there instead)."""
    group, _, version = new["apiVersion"].rpartition("/")
    sent = review(operation="UPDATE", obj=new, old=old, kind=(group, version, new["kind"]), namespace="ns")
    response = answer(VALIDATE_ENABLED if enabled else VALIDATE, sent)
    return response["allowed"], bool(response.get("warnings"))


def policy_applies(policy: dict[str, Any], obj: dict[str, Any]) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    return any(group in r["apiGroups"] and (version in r["apiVersions"] or "*" in r["apiVersions"])
               and RESOURCES[obj["kind"]] in r["resources"] and "UPDATE" in r["operations"]
               for r in policy["spec"]["matchConstraints"]["resourceRules"])


def validation_fails(policy: dict[str, Any], old: dict[str, Any], new: dict[str, Any], *,
                     granted: bool = False) -> bool:
    data: dict[str, Any] = {"object": to_cel(new), "oldObject": to_cel(old), "granted": granted}
    data["variables"] = {v["name"]: VAP_ENV.compile_any(v["expression"]).value(data)
                         for v in policy["spec"]["variables"]}
    assert not any(isinstance(v, EvalError) for v in data["variables"].values()), data["variables"]
    results = [VAP_ENV.compile_bool(v["expression"].replace(EXCEPTION_GRANTED, "granted")).evaluate(data)
               for v in policy["spec"]["validations"]]
    return any(result is not True for result in results)  # false or an error: failurePolicy is Fail


def exported(old: dict[str, Any], new: dict[str, Any], *, enabled: bool = False,
             granted: bool = False) -> tuple[bool, bool]:
    """(allowed, warned) from the exported policies, as the apiserver would evaluate them: a binding
    applies where its namespaceSelector matches the namespace's labels (for a Namespace, its own)."""
    bindings = {d["spec"]["policyName"]: d["spec"] for d in POLICIES if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    ns_labels = ENABLED_NAMESPACE if enabled else PLAIN_NAMESPACE
    if new["kind"] == "Namespace":
        ns_labels = new["metadata"].get("labels") or {}
    actions = {name: spec["validationActions"] for name, spec in bindings.items()
               if matches(spec["matchResources"]["namespaceSelector"], ns_labels)}
    denied = warned = False
    for policy in (d for d in POLICIES if d["kind"] == "ValidatingAdmissionPolicy"):
        if policy["metadata"]["name"] not in actions:
            continue
        if policy_applies(policy, new) and validation_fails(policy, old, new, granted=granted):
            denied |= "Deny" in actions[policy["metadata"]["name"]]
            warned |= "Warn" in actions[policy["metadata"]["name"]]
    return not denied, warned and not denied  # the webhook keeps warnings only for allowed updates


def sei_spec_only(tls: Any) -> dict[str, Any]:
    return {**sei_node(None), "spec": {"sidecar": {"tls": tls}}}


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *[(f"{kind}: {t.name}", workload(kind, t.old), workload(kind, t.new))
      for kind in WORKLOAD_KINDS for t in WORKLOAD_TRANSITIONS],
    *[(f"SeiNode: {name}", sei_node(old), sei_node(new)) for name, old, new, _ in SIDECAR_MATRIX],
    ("SeiNode: tls null -> X", sei_spec_only(None), sei_spec_only(X)),
    ("SeiNode: X -> tls null", sei_spec_only(X), sei_spec_only(None)),
    ("SeiNode: no spec -> X", {**sei_node(None), "spec": None}, sei_node(X)),
    ("SeiNode: sidecar block removed", sei_node(X), sei_node(None, sidecar=False)),
    ("SeiNode: a type error denies in both", {**sei_node(None), "spec": {"sidecar": "s"}},
     {**sei_node(None), "spec": {"sidecar": "s"}}),
    ("Deployment: no template metadata", {**workload("Deployment", (None, None)), "spec": {"template": {}}},
     workload("Deployment", ("true", "x"))),
    *[(f"CronJob: {t.name}", cronjob(t.old), cronjob(t.new)) for t in WORKLOAD_TRANSITIONS],
    *[(f"Namespace: {name}", namespace(old), namespace(new)) for name, old, new, _ in NAMESPACE_TRANSITIONS],
    ("CronJob: no jobTemplate spec", {**cronjob(OFF), "spec": {"jobTemplate": {}}}, cronjob(("true", "x"))),
]
ENABLED_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *[(f"{kind} in an enabled namespace: {t.name}", templated(kind, t.old), templated(kind, t.new))
      for kind in (*WORKLOAD_KINDS, "CronJob") for t in ENABLED_NAMESPACE_TRANSITIONS],
    ("Deployment in an enabled namespace: no template metadata",
     {**workload("Deployment", OFF), "spec": {"template": {}}}, workload("Deployment", ("false", None))),
]


@pytest.mark.parametrize(("case", "old", "new"), CASES, ids=[c[0] for c in CASES])
def test_the_exported_policy_and_the_webhook_agree(case: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    assert exported(old, new) == webhook(old, new)


@pytest.mark.parametrize(("case", "old", "new"), ENABLED_CASES, ids=[c[0] for c in ENABLED_CASES])
def test_the_exported_policy_and_the_webhook_agree_in_an_enabled_namespace(case: str, old: dict[str, Any],
                                                                           new: dict[str, Any]) -> None:
    assert exported(old, new, enabled=True) == webhook(old, new, enabled=True)


def test_the_scoped_policies_bind_only_in_their_kind_of_namespace() -> None:
    """An opt-out outside enabled namespaces is nobody's business; inside, the exported policy denies it.
    Dropping a "true" is the reverse: TLS stays on in an enabled namespace, so only outside is it denied."""
    old, new = workload("Deployment", OFF), workload("Deployment", ("false", None))
    assert exported(old, new) == webhook(old, new) == (True, False)
    assert exported(old, new, enabled=True) == webhook(old, new, enabled=True) == (False, False)
    old, new = workload("Deployment", ("true", None)), workload("Deployment", OFF)
    assert exported(old, new) == webhook(old, new) == (False, False)
    assert exported(old, new, enabled=True) == webhook(old, new, enabled=True) == (True, False)


def test_the_agreement_matrix_has_both_verdicts_and_warnings() -> None:
    """Guards the test above against passing vacuously (e.g. every case allowed)."""
    for cases, enabled in ((CASES, False), (ENABLED_CASES, True)):
        verdicts = [webhook(old, new, enabled=enabled) for _, old, new in cases]
        assert {allowed for allowed, _ in verdicts} == {True, False}
        assert any(warned for _, warned in verdicts)


@pytest.mark.parametrize(("name", "old_tls", "new_tls", "allowed"), SIDECAR_MATRIX)
def test_the_crd_rule_on_the_parent_node_agrees_with_the_webhook(
    name: str, old_tls: Any, new_tls: Any, allowed: bool
) -> None:
    (snippet,) = export_documents(RULES, fmt="crd")
    (entry,) = snippet["x-kubernetes-validations"]
    old, new = sei_node(old_tls), sei_node(new_tls)
    result = CRD_ENV.compile_bool(entry["rule"]).evaluate({"self": new["spec"], "oldSelf": old["spec"]})
    assert result is allowed
    assert webhook(old, new)[0] is allowed


def test_the_example_crd_carries_exactly_the_exported_rule_on_spec() -> None:
    (snippet,) = export_documents(RULES, fmt="crd")
    crd = yaml.safe_load(EXAMPLE_CRD.read_text())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert snippet["schemaNode"] == "spec"
    assert spec_schema["x-kubernetes-validations"] == snippet["x-kubernetes-validations"]


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_the_exported_policies_and_the_example_crd_pass_the_strict_kubernetes_schema(version: str) -> None:
    crd = yaml.safe_load(EXAMPLE_CRD.read_text())
    for document in [*POLICIES, crd]:
        kubernetes_validate.validate(document, version, strict=True)


def test_the_strict_schema_check_does_catch_a_wrong_field() -> None:
    broken = copy.deepcopy(POLICIES[0])
    broken["spec"]["validations"][0]["severity"] = "high"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.30.0", strict=True)


@pytest.mark.parametrize("fmt", ["vap", "crd"])
def test_export_policy_prints_the_documents_as_yaml(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-policy", "--rules", str(EXAMPLE_RULES), "--format", fmt]) == 0
    printed = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]
    assert printed == export_documents(RULES, fmt=fmt)


@pytest.mark.parametrize(("kind", "plural"), [("SeiNode", "seinodes"), ("Ingress", "ingresses"),
                                              ("NetworkPolicy", "networkpolicies")])
def test_a_missing_resource_name_is_guessed_as_kubernetes_guesses_it(kind: str, plural: str) -> None:
    assert guess_resource(kind) == plural
