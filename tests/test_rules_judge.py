"""Judging updates in-process: the seed rule's semantics in the CEL library, nulls, errors, messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules_matrix import EXAMPLE_RULES, FIX, NAMESPACE_FIX, SIDECAR_MATRIX, sei_node
from tls_injector.admission import GroupVersionKind
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.rules import RuleSet, build_rule_set, judge

SEI = GroupVersionKind(group="example.com", version="v1", kind="SeiNode")
RULES = load_rule_set(EXAMPLE_RULES)
SEED = ("(!has(oldSelf.sidecar) || !has(oldSelf.sidecar.tls)) ? true : "
        "(has(self.sidecar) && has(self.sidecar.tls) && self.sidecar.tls == oldSelf.sidecar.tls)")


def rule(name: str, expression: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "match": [{"group": "example.com", "kind": "SeiNode"}], "self": "spec",
            "expression": expression, "message": f"{name} says no", **extra}


def spec(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "spec": spec}


def test_the_example_rules_file_carries_the_seed_rule_verbatim() -> None:
    (seed,) = [r for r in RULES if r.name == "sidecar-tls-transition"]
    assert " ".join(seed.expression.source.split()) == SEED


@pytest.mark.parametrize(("name", "old_tls", "new_tls", "allowed"), SIDECAR_MATRIX)
def test_the_seed_rule_allows_enable_and_unchanged_and_rejects_disable_and_swap(
    name: str, old_tls: Any, new_tls: Any, allowed: bool
) -> None:
    assert judge(RULES, SEI, old=sei_node(old_tls), new=sei_node(new_tls)).allowed is allowed


@pytest.mark.parametrize(
    ("case", "old", "new", "allowed"),
    [
        ("an extra key inside tls is a change", {"secretName": "x"}, {"secretName": "x", "ca": "c"}, False),
        ("key order inside tls is not a change", {"secretName": "x", "ca": "c"}, {"ca": "c", "secretName": "x"}, True),
        ("1 and 1.0 are the same number, as in Kubernetes CEL", {"port": 1}, {"port": 1.0}, True),
        ("a bool is not the number 1", {"on": True}, {"on": 1}, False),
        ("tls: null before counts as absent, so this is an enable", None, {"secretName": "x"}, True),
        ("tls: null after counts as absent, so this is a disable", {"secretName": "x"}, None, False),
        ("null inside tls is dropped on both sides", {"secretName": "x", "ca": None}, {"secretName": "x"}, True),
    ],
)
def test_map_equality_and_null_handling(case: str, old: Any, new: Any, allowed: bool) -> None:
    before, after = spec(sidecar={"tls": old}), spec(sidecar={"tls": new})
    assert judge(RULES, SEI, old=before, new=after).allowed is allowed


def test_the_sidecar_block_going_away_entirely_is_a_disable() -> None:
    verdict = judge(RULES, SEI, old=sei_node({"secretName": "x"}), new=sei_node(None, sidecar=False))
    assert not verdict.allowed
    assert 'spec.sidecar.tls: {"secretName":"x"} -> (absent)' in verdict.failures[0].describe()


def test_an_absent_self_path_is_an_empty_object_so_enabling_a_missing_spec_is_allowed() -> None:
    verdict = judge(RULES, SEI, old={"metadata": {"name": "n"}}, new=sei_node({"secretName": "x"}))
    assert verdict.allowed
    assert verdict.warnings == ("spec.sidecar.tls enabled in place: the pods will roll to pick up their certificates.",)


def test_an_evaluation_error_denies_and_names_the_error_instead_of_crashing() -> None:
    verdict = judge(RULES, SEI, old=spec(sidecar="a string, not an object"), new=spec(sidecar="x"))
    (failure,) = verdict.failures
    assert failure.error is not None
    assert "could not be evaluated" in failure.describe()
    assert "sidecar-tls-transition" in failure.describe()


def test_every_failing_rule_is_reported_not_just_the_first() -> None:
    rules = build_rule_set({"rules": [
        rule("keep-tls", SEED),
        rule("keep-image", "self.image == oldSelf.image"),
        rule("always-fine", "true"),
        rule("broken-at-runtime", "self.missing == 1"),
    ]})
    verdict = judge(rules, SEI, old=sei_node({"secretName": "x"}), new=spec(image="sei:2"))
    assert [f.rule.name for f in verdict.failures] == ["keep-tls", "keep-image", "broken-at-runtime"]
    assert verdict.failures[2].error is not None
    assert "spec.image: \"sei:1\" -> \"sei:2\"" in verdict.failures[1].describe()


def test_warnings_are_dropped_when_the_update_is_denied() -> None:
    rules = build_rule_set({"rules": [
        rule("warns", "true", warnWhen="true", warning="careful"),
        rule("denies", "false"),
    ]})
    verdict = judge(rules, SEI, old=spec(), new=spec())
    assert not verdict.allowed
    assert verdict.warnings == ()


def test_a_warn_when_that_errors_becomes_a_warning_not_a_denial() -> None:
    rules = build_rule_set({"rules": [rule("warns", "true", warnWhen="self.nope == 1", warning="careful")]})
    verdict = judge(rules, SEI, old=spec(), new=spec())
    assert verdict.allowed
    assert verdict.warnings[0].startswith('rule "warns": warnWhen could not be evaluated')


def test_a_long_list_of_changes_is_capped_and_counted() -> None:
    rules = build_rule_set({"rules": [rule("frozen", "self == oldSelf")]})
    old = spec(**{f"k{i}": i for i in range(8)})
    new = spec(**{f"k{i}": i + 1 for i in range(8)})
    (failure,) = judge(rules, SEI, old=old, new=new).failures
    assert len(failure.changes) == 5
    assert "(and 3 more changes)" in failure.describe()


def test_rules_match_by_group_kind_and_optional_version() -> None:
    rules = build_rule_set({"rules": [
        {**rule("v2-only", "false"), "match": [{"group": "example.com", "kind": "SeiNode", "version": "v2"}]},
        {**rule("any-version", "false"), "match": [{"group": "example.com", "kind": "SeiNode"}]},
    ]})
    v1 = judge(rules, SEI, old=spec(), new=spec())
    v2 = judge(rules, GroupVersionKind(group="example.com", version="v2", kind="SeiNode"), old=spec(), new=spec())
    other = judge(rules, GroupVersionKind(group="other.com", version="v1", kind="SeiNode"), old=spec(), new=spec())
    assert [f.rule.name for f in v1.failures] == ["any-version"]
    assert [f.rule.name for f in v2.failures] == ["v2-only", "any-version"]
    assert other.allowed


def test_the_fix_is_part_of_every_shipped_rules_message() -> None:
    assert all((NAMESPACE_FIX if r.name.startswith("namespace-") else FIX) in r.message for r in RULES)
    assert isinstance(RULES, RuleSet)


def test_a_failure_outside_the_named_fields_lists_what_did_change() -> None:
    rules = build_rule_set({"rules": [rule("image-frozen", "self.image == oldSelf.image", fields=["sidecar.tls"])]})
    (failure,) = judge(rules, SEI, old=sei_node(None), new=spec(image="sei:2")).failures
    assert 'spec.image: "sei:1" -> "sei:2"' in failure.describe()
