"""Rules files: bad ones fail at load with the file, line, rule and field; good ones compile once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rules_matrix import EXAMPLE_RULES
from tls_injector.cli import main
from tls_injector.offline.rulesfile import RulesFileError, default_rule_set, load_rule_set, parse_rules_text

GOOD_RULE = """\
  - name: keep-tls
    match: [{group: example.com, kind: SeiNode}]
    self: spec
    expression: self.tls == oldSelf.tls
    message: do not change tls
"""


def problems_in(text: str) -> str:
    with pytest.raises(RulesFileError) as caught:
        parse_rules_text(text, source="my-rules.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("case", "text", "expected"),
    [
        ("unknown rule field", "rules:\n" + GOOD_RULE + "    severity: high\n",
         ["my-rules.yaml:2: rules[0] (keep-tls): unknown field 'severity'"]),
        ("missing expression", "rules:\n  - name: a\n    match: [{group: g.io, kind: K}]\n    message: m\n",
         ["my-rules.yaml:2: rules[0] (a): missing required field 'expression'"]),
        ("CEL syntax error", "rules:\n" + GOOD_RULE + "  - name: bad-cel\n    match: [{group: g.io, kind: K}]\n"
         "    expression: self.tls ==\n    message: m\n",
         ["my-rules.yaml:7: rules[1] (bad-cel) expression: CEL compile error:", "Syntax error"]),
        ("undeclared variable", "rules:\n  - name: a\n    match: [{group: g.io, kind: K}]\n"
         "    expression: object.spec == oldSelf\n    message: m\n",
         ["rules[0] (a) expression: CEL compile error: 1:7: undeclared reference to 'object.spec'"]),
        ("non-bool expression", "rules:\n  - name: a\n    match: [{group: g.io, kind: K}]\n"
         "    expression: \"'text'\"\n    message: m\n", ["must evaluate to a bool, not string"]),
        ("bad self path", "rules:\n  - name: a\n    match: [{group: g.io, kind: K}]\n    self: spec..x\n"
         "    expression: 'true'\n    message: m\n", ["rules[0] (a) self: expected a field name at column 6"]),
        ("bad match entry", "rules:\n  - name: a\n    match: [{kind: K, grp: x}]\n    expression: 'true'\n"
         "    message: m\n", ["match[0]: unknown field 'grp'", "match[0]: group must be a string"]),
        ("empty match", "rules:\n  - name: a\n    match: []\n    expression: 'true'\n    message: m\n",
         ["rules[0] (a) match: must be a non-empty list"]),
        ("bad name", "rules:\n  - name: Bad_Name\n    match: [{group: g.io, kind: K}]\n    expression: 'true'\n"
         "    message: m\n", ["rules[0] (Bad_Name) name: must be a DNS label"]),
        ("duplicate names", "rules:\n" + GOOD_RULE + GOOD_RULE,
         ["my-rules.yaml:7: rules[1] (keep-tls) name: duplicate rule name (also rules[0])"]),
        ("warnWhen without warning", "rules:\n" + GOOD_RULE + "    warnWhen: 'true'\n",
         ["warnWhen and warning go together"]),
        ("unknown top-level field", "rule:\n" + GOOD_RULE, ["unknown field 'rule'", "`rules` must be a list"]),
        ("not a mapping", "- just a list\n", ["must be a mapping with a `rules` list"]),
        ("invalid YAML", "rules: [\n", ["my-rules.yaml:2:1: expected the node content, but found '<stream end>'"]),
    ],
)
def test_a_bad_rules_file_is_refused_with_a_message_that_locates_the_problem(
    case: str, text: str, expected: list[str]
) -> None:
    message = problems_in(text)
    for part in expected:
        assert part in message, message


def test_every_problem_is_reported_in_one_pass() -> None:
    text = ("rules:\n  - name: a\n    match: [{group: g.io, kind: K}]\n    expression: 'self =='\n    message: m\n"
            "  - name: b\n    extra: 1\n    match: [{group: g.io, kind: K}]\n    expression: 'true'\n    message: m\n")
    message = problems_in(text)
    assert "2 problems" in message
    assert "my-rules.yaml:2: rules[0] (a) expression" in message
    assert "my-rules.yaml:6: rules[1] (b): unknown field 'extra'" in message


# Issue 39 points 4 and 5: scope "all", judged whatever the opt-in and the namespace.
NEW_RULES = ["workload-keystore-transition", "cronjob-keystore-transition", "workload-public-roots-transition",
             "cronjob-public-roots-transition", "namespace-public-roots-transition"]
BUILT_IN = ["workload-tls-transition", "cronjob-tls-transition", "workload-client-certificate-transition",
            "cronjob-client-certificate-transition", "namespace-tls-transition",
            "enabled-namespace-workload-tls-transition", "enabled-namespace-cronjob-tls-transition",
            "enabled-namespace-workload-client-certificate-transition",
            "enabled-namespace-cronjob-client-certificate-transition", "workload-tls-mode-transition",
            "cronjob-tls-mode-transition", "workload-trust-only-transition", "cronjob-trust-only-transition",
            "enabled-namespace-workload-trust-only-transition", "enabled-namespace-cronjob-trust-only-transition",
            *NEW_RULES]
APPS_KINDS = {("apps", "v1", "Deployment"), ("apps", "v1", "StatefulSet"), ("apps", "v1", "DaemonSet")}


def test_the_built_in_rules_cover_the_workload_kinds_cronjobs_and_namespaces() -> None:
    rules = {r.name: r for r in default_rule_set().rules}
    assert list(rules) == BUILT_IN
    kinds = {name: {(m.group, m.version, m.kind) for m in rule.match} for name, rule in rules.items()}
    cronjobs = {("batch", "v1", "CronJob")}
    assert kinds == {"workload-tls-transition": APPS_KINDS, "cronjob-tls-transition": cronjobs,
                     "namespace-tls-transition": {("", "v1", "Namespace")},
                     "enabled-namespace-workload-tls-transition": APPS_KINDS,
                     "enabled-namespace-cronjob-tls-transition": cronjobs,
                     "workload-client-certificate-transition": APPS_KINDS,
                     "cronjob-client-certificate-transition": cronjobs,
                     "enabled-namespace-workload-client-certificate-transition": APPS_KINDS,
                     "enabled-namespace-cronjob-client-certificate-transition": cronjobs,
                     "workload-tls-mode-transition": APPS_KINDS, "cronjob-tls-mode-transition": cronjobs,
                     "workload-trust-only-transition": APPS_KINDS, "cronjob-trust-only-transition": cronjobs,
                     "enabled-namespace-workload-trust-only-transition": APPS_KINDS,
                     "enabled-namespace-cronjob-trust-only-transition": cronjobs,
                     "workload-keystore-transition": APPS_KINDS, "cronjob-keystore-transition": cronjobs,
                     "workload-public-roots-transition": APPS_KINDS, "cronjob-public-roots-transition": cronjobs,
                     "namespace-public-roots-transition": {("", "v1", "Namespace")}}
    assert {name: rule.scope for name, rule in rules.items()} == {
        "workload-tls-transition": "other-namespaces", "cronjob-tls-transition": "other-namespaces",
        "namespace-tls-transition": "all", "workload-tls-mode-transition": "all",
        "cronjob-tls-mode-transition": "all",
        "enabled-namespace-workload-tls-transition": "enabled-namespaces",
        "enabled-namespace-cronjob-tls-transition": "enabled-namespaces",
        "workload-client-certificate-transition": "other-namespaces",
        "cronjob-client-certificate-transition": "other-namespaces",
        "enabled-namespace-workload-client-certificate-transition": "enabled-namespaces",
        "enabled-namespace-cronjob-client-certificate-transition": "enabled-namespaces",
        "workload-trust-only-transition": "other-namespaces", "cronjob-trust-only-transition": "other-namespaces",
        "enabled-namespace-workload-trust-only-transition": "enabled-namespaces",
        "enabled-namespace-cronjob-trust-only-transition": "enabled-namespaces",
        **dict.fromkeys(NEW_RULES, "all")}


def test_each_path_runs_the_rules_of_its_kind_of_namespace_and_those_of_all() -> None:
    rules = default_rule_set()
    assert [r.name for r in rules.scoped("enabled-namespaces")] == [
        "namespace-tls-transition", "enabled-namespace-workload-tls-transition",
        "enabled-namespace-cronjob-tls-transition", "enabled-namespace-workload-client-certificate-transition",
        "enabled-namespace-cronjob-client-certificate-transition", "workload-tls-mode-transition",
        "cronjob-tls-mode-transition", "enabled-namespace-workload-trust-only-transition",
        "enabled-namespace-cronjob-trust-only-transition", *NEW_RULES]
    assert [r.name for r in rules.scoped("other-namespaces")] == [
        "workload-tls-transition", "cronjob-tls-transition", "workload-client-certificate-transition",
        "cronjob-client-certificate-transition", "namespace-tls-transition", "workload-tls-mode-transition",
        "cronjob-tls-mode-transition", "workload-trust-only-transition", "cronjob-trust-only-transition", *NEW_RULES]
    with pytest.raises(ValueError, match="not all"):
        rules.scoped("all")


def test_an_unknown_scope_is_refused() -> None:
    message = problems_in("rules:\n" + GOOD_RULE + "    scope: everywhere\n")
    assert "rules[0] (keep-tls) scope: must be one of all, enabled-namespaces, other-namespaces" in message


def test_a_rules_file_adds_to_the_built_in_rules_unless_it_says_otherwise(tmp_path: Path) -> None:
    assert [r.name for r in load_rule_set(EXAMPLE_RULES)] == [*BUILT_IN, "sidecar-tls-transition"]
    alone = tmp_path / "alone.yaml"
    alone.write_text("includeDefaults: false\nrules:\n" + GOOD_RULE)
    assert [r.name for r in load_rule_set(alone)] == ["keep-tls"]


def test_a_rule_may_not_take_a_built_in_rules_name(tmp_path: Path) -> None:
    clash = tmp_path / "clash.yaml"
    clash.write_text("rules:\n" + GOOD_RULE.replace("keep-tls", "workload-tls-transition"))
    with pytest.raises(RulesFileError, match=r"clash.yaml:2: rules\[0\] \(workload-tls-transition\) name: a built-in"):
        load_rule_set(clash)


def test_a_missing_rules_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RulesFileError, match=r"nope\.yaml: cannot read: No such file or directory"):
        load_rule_set(tmp_path / "nope.yaml")


def test_serve_with_a_bad_rules_file_exits_2_before_serving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    match: [{group: g.io, kind: K}]\n    expression: 'self ==('\n"
                   "    message: m\n")
    code = main(["serve", "--rules", str(bad), "--host", "127.0.0.1", "--port", "0",
                 "--self-signed-dir", str(tmp_path / "ss"), "--log-level", "error"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: rules[0] (x) expression: CEL compile error" in err
    assert "Traceback" not in err
