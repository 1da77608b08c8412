"""The rule set rendered natively: ValidatingAdmissionPolicy + binding, and CRD x-kubernetes-validations.

ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, clusters >= 1.30) has no `self`/`oldSelf`:
it sees the whole `object` and `oldObject`. Rather than rewriting the user's expression (a CEL rewrite
is a second parser that can disagree with the first), the export binds the names around it:

    variables:   selfValue    = <object at the rule's self path, or {} when absent>
                 oldSelfValue = <the same on oldObject>
    expression:  [variables.selfValue].all(self, [variables.oldSelfValue].all(oldSelf, <rule, verbatim>))

`[x].all(v, e)` is CEL's standard comprehension over a one-element list: it evaluates `e` with `v`
bound to `x` and returns `e`'s own bool, or its error — the same value and the same error behaviour
as the rule itself. The "or {}" mirrors the webhook's treatment of an absent `self` path.
"""

from __future__ import annotations

from typing import Any, Literal

from tls_injector.names import (
    DEFAULT_NAMESPACE,
    EXCEPTION_GROUP,
    EXCEPTION_RESOURCE,
    EXCEPTION_VERB,
    INJECT_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NAMESPACE_OPT_IN,
    POLICY_NAME_PREFIX,
)
from tls_injector.rules.dispatch import condition_documents
from tls_injector.rules.handler import DENIED_REASON
from tls_injector.rules.model import (
    SCOPE_ENABLED_NAMESPACES,
    SCOPE_OTHER_NAMESPACES,
    Match,
    Rule,
    RuleSet,
    guess_resource,
)
from tls_injector.rules.paths import cel_value_or_empty, format_path

ADMISSIONREGISTRATION = "admissionregistration.k8s.io/v1"
NAME_PREFIX = POLICY_NAME_PREFIX
SELF_VARIABLE, OLD_SELF_VARIABLE = "selfValue", "oldSelfValue"
ExportFormat = Literal["vap", "crd", "conditions"]
# The bindings skip the namespaces the webhook configurations skip: the control plane's, and the
# injector's own (the caller names it). Matched by `kubernetes.io/metadata.name`, which the apiserver
# sets on every Namespace and nobody can change.
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease", "kube-public")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_OWN_NAMESPACE = DEFAULT_NAMESPACE
# A rule with an `exception` lets an update through when the exception holds and RBAC grants the
# requester the verb on the virtual resource, in the object's namespace, by the object's name: the
# apiserver's own authorizer, so RBAC is the one authority (docs/rules.md, "Exceptions").
EXCEPTION_GRANTED = (f"authorizer.group('{EXCEPTION_GROUP}').resource('{EXCEPTION_RESOURCE}')"
                     f".namespace(request.namespace).name(request.name).check('{EXCEPTION_VERB}').allowed()")
# A rule scoped to enabled (other) namespaces binds only in (outside) those, as its webhook entry selects.
NAMESPACE_OPT_IN_LABEL = INJECT_LABEL


def export_documents(rule_set: RuleSet, *, fmt: ExportFormat,
                     own_namespace: str = DEFAULT_OWN_NAMESPACE) -> list[dict[str, Any]]:
    if fmt == "vap":
        return validating_admission_policies(rule_set, own_namespace=own_namespace)
    if fmt == "conditions":
        return condition_documents(rule_set)
    return crd_validation_snippets(rule_set)


def validating_admission_policies(rule_set: RuleSet, *,
                                  own_namespace: str = DEFAULT_OWN_NAMESPACE) -> list[dict[str, Any]]:
    """Per rule: a policy + binding with action Deny, and with `warnWhen` a second pair with Warn. The
    bindings leave out the system namespaces and `own_namespace`, as the webhook configurations do."""
    excluded = [*SYSTEM_NAMESPACES, own_namespace]
    documents: list[dict[str, Any]] = []
    for rule in rule_set:
        name = NAME_PREFIX + rule.name
        validation = {"expression": validation_expression(rule), "reason": DENIED_REASON,
                      "message": _one_line(f'rule "{rule.name}": {rule.message}')}
        documents += [_policy(rule, name, validation), _binding(name, "Deny", excluded, rule.scope)]
        if rule.warning is not None:
            warn = {"expression": vap_expression(f"!({rule.warning.when.source})"),
                    "message": _one_line(rule.warning.message)}
            documents += [_policy(rule, f"{name}.warnings", warn),
                          _binding(f"{name}.warnings", "Warn", excluded, rule.scope)]
    return documents


def exception_policy_names(rule_set: RuleSet) -> tuple[str, ...]:
    """The Deny policies (and their bindings, of the same name) that check RBAC for a rule's exception."""
    return tuple(NAME_PREFIX + rule.name for rule in rule_set if rule.exception is not None)


def validation_expression(rule: Rule) -> str:
    """The rule, or its exception taken by a subject RBAC grants it."""
    held = vap_expression(rule.expression.source)
    if rule.exception is None:
        return held
    return f"{held} || ({vap_expression(rule.exception.source)} && {EXCEPTION_GRANTED})"


def vap_expression(source: str) -> str:
    """The rule wrapped so that `self`/`oldSelf` are bound inside a ValidatingAdmissionPolicy."""
    return (f"[variables.{SELF_VARIABLE}].all(self, [variables.{OLD_SELF_VARIABLE}].all(oldSelf, "
            f"{source}))")


def vap_variables(rule: Rule) -> list[dict[str, str]]:
    return [
        {"name": SELF_VARIABLE, "expression": cel_value_or_empty("object", rule.self_path)},
        {"name": OLD_SELF_VARIABLE, "expression": cel_value_or_empty("oldObject", rule.self_path)},
    ]


def crd_validation_snippets(rule_set: RuleSet) -> list[dict[str, Any]]:
    """For rules on custom resources: the x-kubernetes-validations entry for the `self` schema node.

    Built-in kinds (groups without a dot, or *.k8s.io) have no CRD to carry it and are skipped.
    """
    return [
        {
            "rule": rule.name,
            "kinds": [_match_dict(m) for m in rule.match],
            "schemaNode": format_path(rule.self_path) if rule.self_path else "(the root schema)",
            "x-kubernetes-validations": [
                {"rule": rule.expression.source, "message": _one_line(rule.message), "reason": "FieldValueInvalid"},
            ],
        }
        for rule in rule_set
        if any(_is_custom(m.group) for m in rule.match)
    ]


def _policy(rule: Rule, name: str, validation: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSIONREGISTRATION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGER}},
        "spec": {
            # An error must not let a change through: the webhook denies on error too (see judge.py).
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [_resource_rule(m) for m in rule.match]},
            "variables": vap_variables(rule),
            "validations": [validation],
        },
    }


def _binding(name: str, action: Literal["Deny", "Warn"], excluded: list[str], scope: str) -> dict[str, Any]:
    outside = {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": excluded}
    selector: dict[str, Any] = {"matchExpressions": [outside]}
    if scope == SCOPE_ENABLED_NAMESPACES:
        selector["matchLabels"] = {NAMESPACE_OPT_IN_LABEL: NAMESPACE_OPT_IN}
    elif scope == SCOPE_OTHER_NAMESPACES:  # NotIn also matches a namespace without the label
        selector["matchExpressions"].append(
            {"key": NAMESPACE_OPT_IN_LABEL, "operator": "NotIn", "values": [NAMESPACE_OPT_IN]})
    return {
        "apiVersion": ADMISSIONREGISTRATION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGER}},
        "spec": {"policyName": name, "validationActions": [action],
                 "matchResources": {"namespaceSelector": selector}},
    }


def _resource_rule(match: Match) -> dict[str, list[str]]:
    return {
        "apiGroups": [match.group],
        "apiVersions": [match.version or "*"],
        "resources": [match.resource or guess_resource(match.kind)],
        "operations": ["UPDATE"],  # only updates are judged, as in the webhook
    }


def _match_dict(match: Match) -> dict[str, str]:
    found = {"group": match.group, "version": match.version, "kind": match.kind}
    return {key: value for key, value in found.items() if value is not None}


def _is_custom(group: str) -> bool:
    return "." in group and not group.endswith(".k8s.io")


def _one_line(text: str) -> str:
    """Policy and CRD messages may not contain line breaks."""
    return " ".join(text.split())
