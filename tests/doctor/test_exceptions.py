"""Doctor's check that a webhook granting TLS exceptions (`serve --tls-exceptions policy`) runs beside the
admission policies that ask RBAC (docs/rules.md, "Exceptions"): its reading of the flag against serve's own
parser, the names it requires against what the admission-policy component ships, and its verdicts."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tls_injector.cli.parser import build_parser
from tls_injector.doctor import DoctorSettings, Snapshot
from tls_injector.doctor.exceptions import check_exceptions_guarded, granting_deployments, grants_exceptions
from tls_injector.doctor.snapshot import Exceptions
from tls_injector.offline.rulesfile import default_rule_set
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings
from tls_injector.rules import exception_policy_names, export_documents

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 6, 1, tzinfo=UTC)
NAMES = exception_policy_names(default_rule_set())
SETTINGS = DoctorSettings(namespace="tls-injector", cluster_domain="cluster.local", webhook=WebhookSettings(),
                          ca_secret="tls-injector-ca", exception_policies=NAMES)


@pytest.mark.parametrize("extra", [
    [], ["--tls-exceptions", "policy"], ["--tls-exceptions=policy"], ["--tls-exceptions", "off"],
    ["--tls-exceptions=off"], ["--tls-exceptions=policy", "--tls-exceptions=off"],
    ["--tls-exceptions", "off", "--tls-exceptions", "policy"], ["--rules", "policy"],
])
def test_the_flag_is_read_as_serves_own_parser_reads_it(extra: list[str]) -> None:
    argv = ["serve", "--port", "8443", *extra]
    parsed = build_parser().parse_args(argv)
    assert grants_exceptions(argv) == (parsed.tls_exceptions == "policy")


def _deployment(args: list[str], *, name: str = "tls-injector") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "tls-injector"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "image": "example/proxy:1"},
                {"name": "webhook", "command": ["tls-injector"], "args": args}]}}}}


def _component() -> tuple[list[str], dict[str, Any]]:
    """The admission-policy component as shipped: the args its patch adds, and its policy documents by name."""
    folder = ROOT / "manifests" / "components" / "admission-policy"
    kustomization = YAML(typ="safe").load((folder / "kustomization.yaml").read_text())
    added = [p for patch in kustomization["patches"] for p in YAML(typ="safe").load(patch["patch"])]
    args = [str(op["value"]) for op in added if op["path"].endswith("/args/-")]
    documents = {(d["kind"], d["metadata"]["name"]): d
                 for d in YAML(typ="safe").load_all((folder / "policies.yaml").read_text()) if d}
    return args, documents


def test_the_component_grants_exceptions_and_ships_every_policy_doctor_requires() -> None:
    args, documents = _component()
    assert granting_deployments([_deployment(["serve", *args])]) == ["tls-injector/tls-injector"]
    assert NAMES, "the built-in rules have exceptions"
    snap = Snapshot(SETTINGS, NOW)
    snap.exceptions = Exceptions(["tls-injector/tls-injector"],
                                 {n: documents.get(("ValidatingAdmissionPolicy", n)) for n in NAMES},
                                 {n: documents.get(("ValidatingAdmissionPolicyBinding", n)) for n in NAMES})
    result = check_exceptions_guarded(snap)
    assert result.status == "ok", result


def _guarded(policies: dict[str, Any] | None = None, bindings: dict[str, Any] | None = None,
             granting: tuple[str, ...] = ("tls-injector/tls-injector",)) -> Any:
    exported = {(d["kind"], d["metadata"]["name"]): d for d in export_documents(default_rule_set(), fmt="vap")}
    snap = Snapshot(SETTINGS, NOW)
    snap.exceptions = Exceptions(
        list(granting),
        policies if policies is not None else {n: exported["ValidatingAdmissionPolicy", n] for n in NAMES},
        bindings if bindings is not None else {n: exported["ValidatingAdmissionPolicyBinding", n] for n in NAMES})
    return check_exceptions_guarded(snap)


def _exported(kind: str) -> dict[str, Any]:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in export_documents(default_rule_set(), fmt="vap")}
    return {n: copy.deepcopy(docs[kind, n]) for n in NAMES}


def test_a_webhook_that_grants_none_needs_no_policy() -> None:
    result = _guarded(policies={}, bindings={}, granting=())
    assert (result.status, "--tls-exceptions policy" in result.message) == ("ok", True), result


def test_every_policy_installed_and_bound_with_deny_is_healthy() -> None:
    assert _guarded().status == "ok"


def test_a_missing_policy_is_an_error_naming_it_and_the_hole() -> None:
    policies = _exported("ValidatingAdmissionPolicy")
    policies[NAMES[0]] = None
    result = _guarded(policies=policies)
    assert result.status == "error"
    assert f"ValidatingAdmissionPolicy {NAMES[0]} is not installed" in result.details
    assert "can turn its TLS off" in result.message


def test_a_missing_or_warn_only_binding_is_an_error() -> None:
    bindings = _exported("ValidatingAdmissionPolicyBinding")
    bindings[NAMES[0]] = None
    assert _guarded(bindings=bindings).status == "error"
    bindings = _exported("ValidatingAdmissionPolicyBinding")
    bindings[NAMES[-1]]["spec"]["validationActions"] = ["Warn"]
    result = _guarded(bindings=bindings)
    assert result.status == "error"
    assert any("with the action Deny" in d for d in result.details), result.details


def test_a_policy_that_does_not_ask_rbac_is_an_error() -> None:
    policies = _exported("ValidatingAdmissionPolicy")
    for validation in policies[NAMES[0]]["spec"]["validations"]:
        validation["expression"] = validation["expression"].split(" || ")[0]
    result = _guarded(policies=policies)
    assert result.status == "error"
    assert any("does not ask RBAC" in d for d in result.details), result.details


def test_what_cannot_be_read_is_a_warning_not_a_verdict() -> None:
    snap = Snapshot(SETTINGS, NOW)
    snap.errors["exceptions"] = "Forbidden: deployments.apps is forbidden"
    result = check_exceptions_guarded(snap)
    assert result.status == "warning"
    assert "cannot tell" in result.message


def test_only_deployments_running_the_flag_count() -> None:
    deployments = [_deployment(["serve"], name="a"), _deployment(["serve", "--tls-exceptions", "policy"], name="b"),
                   _deployment(["serve", "--tls-exceptions=off"], name="c"), {"metadata": {"name": "empty"}}]
    assert granting_deployments(deployments) == ["tls-injector/b"]
