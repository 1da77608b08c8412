"""The sanctioned exception to the TLS transition rules (docs/rules.md, "Exceptions"): the pod template's
annotation tls-injector.io/tls-change names exactly one change, `<old>-><new>`; the webhook lets that
change through only with --tls-exceptions policy (the exported policies then check RBAC), and says how
to ask for it when it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tls_injector.admission import GroupVersionKind
from tls_injector.names import TLS_CHANGE_ANNOTATION
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.rules import RulesError, build_rule_set, judge, validating_admission_policies
from tls_injector.rules.export import EXCEPTION_GRANTED
from tls_injector.rules.judge import EXCEPTION_TAKEN

DEPLOYMENT = GroupVersionKind(group="apps", version="v1", kind="Deployment")
CRONJOB = GroupVersionKind(group="batch", version="v1", kind="CronJob")
RULES = load_rule_set(None)
OTHER = RULES.scoped("other-namespaces")
ENABLED = RULES.scoped("enabled-namespaces")
# The rules that carry the exception: TLS on/off and its Secret, for every kind and both scopes.
EXCEPTED = {"workload-tls-transition", "cronjob-tls-transition", "enabled-namespace-workload-tls-transition",
            "enabled-namespace-cronjob-tls-transition"}


def template(inject: str | None, secret: str | None, change: str | None = None) -> dict[str, Any]:
    labels = {} if inject is None else {"tls-injector.io/inject": inject}
    annotations = {} if secret is None else {"tls-injector.io/secret-name": secret}
    if change is not None:
        annotations[TLS_CHANGE_ANNOTATION] = change
    return {"labels": labels, "annotations": annotations}


def workload(kind: GroupVersionKind, metadata: dict[str, Any]) -> dict[str, Any]:
    if kind["kind"] == "CronJob":
        return {"spec": {"jobTemplate": {"spec": {"template": {"metadata": metadata}}}}}
    return {"spec": {"template": {"metadata": metadata}}}


# (old inject, old secret, new inject, new secret, the annotation that names the change), outside enabled
# namespaces, where TLS is the label "true".
OTHER_CHANGES = [
    ("true", "api-tls", None, "api-tls", "api-tls->(off)"),
    ("true", "api-tls", "false", None, "api-tls->(off)"),
    ("true", None, None, None, "(default)->(off)"),
    ("true", "api-tls", "true", "api-v2-tls", "api-tls->api-v2-tls"),
    ("true", None, "true", "api-v2-tls", "(default)->api-v2-tls"),
    ("true", "api-tls", "true", None, "api-tls->(default)"),
]
# Inside enabled namespaces TLS is on unless the label is "false".
ENABLED_CHANGES = [
    (None, "api-tls", "false", "api-tls", "api-tls->(off)"),
    ("true", None, "false", None, "(default)->(off)"),
    (None, "api-tls", None, "api-v2-tls", "api-tls->api-v2-tls"),
]


def cases() -> list[tuple[Any, ...]]:
    return ([(OTHER, kind, *change) for kind in (DEPLOYMENT, CRONJOB) for change in OTHER_CHANGES]
            + [(ENABLED, kind, *change) for kind in (DEPLOYMENT, CRONJOB) for change in ENABLED_CHANGES])


@pytest.mark.parametrize("case", cases())
def test_the_annotation_naming_the_change_lets_it_through_only_where_the_webhook_grants_exceptions(
    case: tuple[Any, ...],
) -> None:
    rules, kind, old_inject, old_secret, new_inject, new_secret, change = case
    old = workload(kind, template(old_inject, old_secret))
    bare = workload(kind, template(new_inject, new_secret))
    named = workload(kind, template(new_inject, new_secret, change))
    refused = judge(rules, kind, old=old, new=bare, exceptions=True)
    assert not refused.allowed  # the rule itself refuses the change
    (failure,) = refused.failures
    assert failure.rule.name in EXCEPTED
    assert "tls-injector.io/tls-change" in failure.describe()
    assert "change-tls" in failure.describe()
    taken = judge(rules, kind, old=old, new=named, exceptions=True)
    assert taken.allowed
    assert EXCEPTION_TAKEN.format(rule=failure.rule.name) in taken.warnings
    off = judge(rules, kind, old=old, new=named, exceptions=False)
    assert not off.allowed
    assert "names itself as an exception" in off.failures[0].describe()
    assert "failed on" in off.failures[0].describe()
    assert "--tls-exceptions" in off.failures[0].describe()


@pytest.mark.parametrize("change", ["api-tls->api-v3-tls", "api-tls->(default)", "api-tls -> (off)", "api-tls->off",
                                    "API-TLS->(off)", "(off)->api-tls", "", "api-tls->(off) "])
def test_an_annotation_naming_any_other_change_allows_nothing(change: str) -> None:
    old = workload(DEPLOYMENT, template("true", "api-tls"))
    new = workload(DEPLOYMENT, template(None, "api-tls", change))
    verdict = judge(OTHER, DEPLOYMENT, old=old, new=new, exceptions=True)
    assert not verdict.allowed
    assert "names itself" not in verdict.failures[0].describe()


def test_the_annotation_is_single_use_a_second_change_under_it_is_refused() -> None:
    first = workload(DEPLOYMENT, template("true", "api-tls"))
    second = workload(DEPLOYMENT, template("true", "api-v2-tls", "api-tls->api-v2-tls"))
    assert judge(OTHER, DEPLOYMENT, old=first, new=second, exceptions=True).allowed
    third = workload(DEPLOYMENT, template("true", "api-v3-tls", "api-tls->api-v2-tls"))
    assert not judge(OTHER, DEPLOYMENT, old=second, new=third, exceptions=True).allowed
    off = workload(DEPLOYMENT, template(None, "api-v2-tls", "api-tls->api-v2-tls"))
    assert not judge(OTHER, DEPLOYMENT, old=second, new=off, exceptions=True).allowed


def test_a_leftover_annotation_on_an_allowed_update_changes_nothing() -> None:
    old = workload(DEPLOYMENT, template("true", "api-tls", "api-tls->(off)"))
    new = workload(DEPLOYMENT, template("true", "api-tls", "api-tls->(off)"))
    new["spec"]["replicas"] = 3
    for exceptions in (False, True):
        verdict = judge(OTHER, DEPLOYMENT, old=old, new=new, exceptions=exceptions)
        assert verdict.allowed
        assert not verdict.warnings


def test_the_exception_covers_only_its_rule_the_client_certificate_rule_still_refuses() -> None:
    """Turning TLS off where a client certificate was asked for is two refusals; the annotation answers
    the TLS rule's only: the client certificate's rule has no exception."""
    old = workload(DEPLOYMENT, {"labels": {"tls-injector.io/inject": "true"},
                                "annotations": {"tls-injector.io/client-certificate": "true"}})
    new = workload(DEPLOYMENT, {"labels": {}, "annotations": {"tls-injector.io/client-certificate": "true",
                                                              TLS_CHANGE_ANNOTATION: "(default)->(off)"}})
    verdict = judge(OTHER, DEPLOYMENT, old=old, new=new, exceptions=True)
    assert [f.rule.name for f in verdict.failures] == ["workload-client-certificate-transition"]


def test_only_the_tls_rules_carry_an_exception_and_their_policies_ask_the_authorizer() -> None:
    assert {rule.name for rule in RULES if rule.exception is not None} == EXCEPTED
    documents = validating_admission_policies(RULES)
    policies = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"}
    for name, policy in policies.items():
        (validation,) = policy["spec"]["validations"]
        asks = EXCEPTION_GRANTED in validation["expression"]
        assert asks is (name.removeprefix("tls-injector.") in EXCEPTED), name
    assert EXCEPTION_GRANTED == ("authorizer.group('tls-injector.io').resource('tlsexceptions')"
                                 ".namespace(request.namespace).name(request.name).check('change-tls').allowed()")


def rule_with(exception: Any) -> dict[str, Any]:
    return {"rules": [{"name": "r", "match": [{"group": "example.com", "kind": "K"}], "self": "spec",
                       "expression": "true", "message": "no", "exception": exception}]}


@pytest.mark.parametrize(("exception", "problem"), [
    (None, "must be a non-empty CEL expression"),
    ("", "must be a non-empty CEL expression"),
    (3, "must be a non-empty CEL expression"),
    ("self.x ==", "CEL compile error"),
])
def test_a_rules_file_exception_must_be_a_cel_expression(exception: Any, problem: str) -> None:
    with pytest.raises(RulesError) as raised:
        build_rule_set(rule_with(exception))
    assert len(raised.value.problems) == 1
    assert problem in str(raised.value)
    assert "exception" in str(raised.value)


def test_a_rules_file_rule_may_carry_an_exception() -> None:
    (built,) = build_rule_set(rule_with("has(self.ok)")).rules
    assert built.exception is not None
    assert built.exception.source == "has(self.ok)"


def as_object(kind: GroupVersionKind, metadata: dict[str, Any]) -> dict[str, Any]:
    api_version = f"{kind['group']}/{kind['version']}"
    return {"apiVersion": api_version, "kind": kind["kind"], "metadata": {"name": "api", "namespace": "shop"},
            **workload(kind, metadata)}


@pytest.mark.parametrize("case", cases())
@pytest.mark.parametrize("named", [True, False])
def test_the_exported_policy_and_the_webhook_agree_on_exceptions(case: tuple[Any, ...], named: bool) -> None:
    """A granted requester (the policy's authorizer true) is let through where the webhook grants
    exceptions; an ordinary one (false) is refused as by a webhook that grants none; an update whose
    annotation is absent is refused by both, granted or not. The policy here is evaluated with the same CEL
    library, the authorizer's check standing as a bool (test_rules_export.validation_fails)."""
    from tests.test_rules_export import exported

    rules, kind, old_inject, old_secret, new_inject, new_secret, change = case
    enabled = rules is ENABLED
    old = as_object(kind, template(old_inject, old_secret))
    new = as_object(kind, template(new_inject, new_secret, change if named else None))
    for granted in (False, True):
        by_policy = exported(old, new, enabled=enabled, granted=granted)[0]
        by_webhook = judge(rules, kind, old=old, new=new, exceptions=granted).allowed
        assert by_policy == by_webhook == (named and granted)


def test_check_says_how_to_ask_and_judges_as_a_webhook_with_exceptions_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from tls_injector.cli import main

    def manifest(metadata: dict[str, Any]) -> dict[str, Any]:
        return {**as_object(DEPLOYMENT, metadata)}

    old, bare, named = tmp_path / "old.json", tmp_path / "bare.json", tmp_path / "named.json"
    old.write_text(json.dumps(manifest(template("true", "api-tls"))))
    bare.write_text(json.dumps(manifest(template(None, "api-tls"))))
    named.write_text(json.dumps(manifest(template(None, "api-tls", "api-tls->(off)"))))
    assert main(["check", "--old", str(old), "--new", str(bare)]) == 1
    assert "tls-injector.io/tls-change" in capsys.readouterr().out
    assert main(["check", "--old", str(old), "--new", str(named)]) == 1
    assert "names itself as an exception" in capsys.readouterr().out
    assert main(["check", "--old", str(old), "--new", str(named), "--tls-exceptions", "policy"]) == 0
    assert EXCEPTION_TAKEN.format(rule="workload-tls-transition") in capsys.readouterr().out
    assert main(["check", "--old", str(old), "--new", str(bare), "--tls-exceptions", "policy"]) == 1
