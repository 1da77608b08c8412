"""The shipped dispatch sends every update a rule refuses: the validating entries' matchCondition is the
one derived from the rules (app/rules/dispatch.py), and every rule's forbidden transition, for every kind
and namespace shape, reaches the path that judges it and is refused there (the real apiserver does the
same in tests/cluster/test_dispatch.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.dispatch_matrix import CASES, KINDS, NAMESPACE_CASES, Case, expected_rule, manifest
from tests.dispatch_matrix import Keys as KeysType
from tests.shipping.support import ROOT, render
from tests.shipping.test_webhooks import ENABLED_NS, ENABLED_PATH, PLAIN_NS, RESOURCES, _answer, _sent_to
from tls_injector.admission import GroupVersionKind
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.rules import build_rule_set, export_documents
from tls_injector.rules.dispatch import CONDITION_NAME, entry_condition, entry_kinds, match_condition, narrowable
from tools import webhook_conditions

DEPLOYMENT = GroupVersionKind(group="apps", version="v1", kind="Deployment")


def _validating_entries() -> list[dict[str, Any]]:
    objects = render(ROOT / "manifests/base")
    return [hook for c in objects if c["kind"] == "ValidatingWebhookConfiguration" for hook in c["webhooks"]]


@pytest.mark.parametrize("hook", _validating_entries(), ids=lambda hook: hook["name"])
def test_each_shipped_entry_carries_the_condition_derived_from_the_rules(hook: dict[str, Any]) -> None:
    derived = [c["expression"] for c in hook["matchConditions"] if c["name"] == CONDITION_NAME]
    assert derived == [entry_condition(load_rule_set(None), hook)]


@pytest.mark.parametrize("hook", _validating_entries(), ids=lambda hook: hook["name"])
def test_export_policy_gives_each_kind_of_each_shipped_entry_its_condition(hook: dict[str, Any]) -> None:
    """`tls-injector export-policy --format conditions`, per kind, is what the shipped entries carry."""
    rule_set = load_rule_set(None)
    exported = {(d["kind"], d["path"]): d["matchConditions"] for d in export_documents(rule_set, fmt="conditions")}
    path = hook["clientConfig"]["service"]["path"]
    shipped = [c for c in hook["matchConditions"] if c["name"] == CONDITION_NAME]
    kinds = entry_kinds(rule_set, hook)
    assert kinds
    for kind in kinds:
        assert exported[(kind["kind"], path)] == shipped


def test_the_chart_and_the_base_hold_the_condition_as_the_tool_writes_it() -> None:
    """The chart is held equal to the base's rendering field for field (test_chart.py); here its text too."""
    wanted = webhook_conditions.conditions()
    for path in webhook_conditions.FILES:
        text = path.read_text()
        assert webhook_conditions.rewritten(text, wanted) == text, f"run tools/webhook_conditions.py ({path})"


def test_every_built_in_rule_declares_every_key_its_expression_reads_and_can_be_narrowed() -> None:
    """The condition trusts each rule's `fields`: a key the expression quotes but `fields` omits would be an
    update the dispatch keeps away from the rule."""
    for rule in load_rule_set(None):
        quoted = set(re.findall(r"'(tls-injector\.io/[a-z-]+)'", rule.expression.source))
        assert quoted == {field[-1] for field in rule.fields}, rule.name
        assert narrowable(rule), rule.name


def _one_rule(**extra: Any) -> dict[str, Any]:
    rule = {"name": "r", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
            "self": "spec.template.metadata", "expression": "true", "message": "m"} | extra
    return {"rules": [rule]}


@pytest.mark.parametrize(("extra", "condition"), [
    ({}, "true"),  # no fields declared: nothing narrows it
    ({"fields": ['annotations["a.io/x"]'], "expression": "has(self.annotations)"}, "true"),  # refuses absent
    ({"fields": ['annotations["a.io/x"]'], "expression": "true", "warnWhen": "true", "warning": "w"}, "true"),
    # reads the parent, not only the field: refuses when annotations exist without a.io/x
    ({"fields": ['annotations["a.io/x"]'], "expression": "!has(self.annotations)"}, "true"),
    ({"fields": ['annotations["a.io/x"]', "spec"], "expression": "true"},
     "(has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) && "
     "has(object.spec.template.metadata.annotations) && 'a.io/x' in object.spec.template.metadata.annotations) || "
     "(has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) && "
     "has(object.spec.template.metadata.spec)) || "
     "(oldObject != null && has(oldObject.spec) && has(oldObject.spec.template) && "
     "has(oldObject.spec.template.metadata) && has(oldObject.spec.template.metadata.annotations) && "
     "'a.io/x' in oldObject.spec.template.metadata.annotations) || "
     "(oldObject != null && has(oldObject.spec) && has(oldObject.spec.template) && "
     "has(oldObject.spec.template.metadata) && has(oldObject.spec.template.metadata.spec))"),
], ids=["no-fields", "refuses-when-absent", "warns-when-absent", "reads-the-parent", "fields"])
def test_a_rule_is_narrowed_by_its_fields_only_when_it_allows_them_absent(extra: dict[str, Any],
                                                                        condition: str) -> None:
    rule_set = build_rule_set(_one_rule(**extra))
    assert match_condition(rule_set, kinds=[DEPLOYMENT], scope="other-namespaces") == condition


def test_a_new_annotation_in_a_rule_joins_the_condition() -> None:
    rule_set = build_rule_set(_one_rule(fields=['annotations["a.io/new"]']))
    assert "'a.io/new' in oldObject.spec.template.metadata.annotations" in match_condition(
        rule_set, kinds=[DEPLOYMENT], scope="enabled-namespaces")


def test_the_table_has_a_forbidden_transition_for_every_rule_and_kind() -> None:
    refused = {(expected_rule(case, kind), kind) for case in CASES for kind in KINDS if not case.allowed}
    refused |= {(name, "Namespace") for name, _, _, allowed in NAMESPACE_CASES if not allowed}
    wanted = {(rule.name, match.kind) for rule in load_rule_set(None) for match in rule.match}
    assert refused == wanted


def _objects(case: Case, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    old = manifest(kind, "web", "shop", case.old)
    new = manifest(kind, "web", "shop", case.new, image="registry.invalid/app:2" if case.image_change else
                   "registry.invalid/app:1")
    return old, new


CASE_KINDS = [(case, kind) for case in CASES for kind in KINDS]


@pytest.mark.parametrize(("case", "kind"), CASE_KINDS, ids=[f"{kind}: {case.id}" for case, kind in CASE_KINDS])
def test_every_forbidden_transition_reaches_its_path_once_and_is_refused_there(case: Case, kind: str) -> None:
    old, new = _objects(case, kind)
    enabled = case.shape == "enabled"
    ns_labels, path, other = (ENABLED_NS, ENABLED_PATH, "/validate") if enabled else (PLAIN_NS, "/validate",
                                                                                     ENABLED_PATH)
    sent = _sent_to(RESOURCES[kind], path, old, new, ns_labels)
    assert _sent_to(RESOURCES[kind], other, old, new, ns_labels) == 0
    answer = _answer(path, kind, old, new)
    rule = expected_rule(case, kind)
    if rule is None:
        assert answer["allowed"] is True, answer
        assert sent <= 1
        return
    assert sent == 1
    assert answer["allowed"] is False
    assert f'rule "{rule}"' in answer["status"]["message"]


def _namespace(labels: KeysType) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop"} | labels}}


@pytest.mark.parametrize(("rule", "old", "new", "allowed"), NAMESPACE_CASES,
                         ids=[f"{c[0]}: {c[1]} -> {c[2]}" for c in NAMESPACE_CASES])
def test_every_forbidden_namespace_transition_reaches_validate_and_is_refused(rule: str, old: KeysType,
                                                                             new: KeysType, allowed: bool) -> None:
    before, after = _namespace(old), _namespace(new)
    assert _sent_to("namespaces", "/validate", before, after, after["metadata"]["labels"]) == 1
    answer = _answer("/validate", "Namespace", before, after)
    assert answer["allowed"] is allowed
    if not allowed:
        assert f'rule "{rule}"' in answer["status"]["message"]


def test_the_issue_cases_in_an_enabled_namespace_are_sent_and_refused() -> None:
    """The updates the label-and-three-annotations condition let through unjudged."""
    for kind, old, new in [("Deployment", {"tls-injector.io/keystore": "pkcs12"}, {}),
                           ("Deployment", {"tls-injector.io/keystore": "pkcs12",
                                           "tls-injector.io/keystore-password-secret": "a"},
                            {"tls-injector.io/keystore": "pkcs12", "tls-injector.io/keystore-password-secret": "b"}),
                           ("Deployment", {"tls-injector.io/public-roots": "true"}, {}),
                           ("CronJob", {}, {"tls-injector.io/mode": "trust-only"}),
                           ("CronJob", {"tls-injector.io/keystore": "pkcs12"}, {})]:
        before, after = manifest(kind, "web", "shop", old), manifest(kind, "web", "shop", new)
        assert _sent_to(RESOURCES[kind], ENABLED_PATH, before, after, ENABLED_NS) == 1, (kind, old, new)
        assert _answer(ENABLED_PATH, kind, before, after)["allowed"] is False


def test_the_base_file_parses_as_the_tool_reads_it() -> None:
    hooks = yaml.safe_load(webhook_conditions.BASE.read_text())["webhooks"]
    assert {hook["name"] for hook in hooks} == {hook["name"] for hook in _validating_entries()}
