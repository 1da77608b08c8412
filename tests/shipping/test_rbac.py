"""RBAC: least privilege, with every grant tied to something that ships."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.shipping.support import Obj, installed, of_kind, only
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

ROLE_KINDS = ("Role", "ClusterRole")
# Verbs that hand out more than their resource: granting roles, acting as someone else.
DANGEROUS_VERBS = {"escalate", "bind", "impersonate", "*"}


def roles() -> list[Obj]:
    objects = installed()
    return [o for kind in ROLE_KINDS for o in of_kind(objects, kind)]


def rules_of(role: Obj) -> Iterator[Obj]:
    yield from role.get("rules") or []


@pytest.mark.parametrize("role", roles(), ids=lambda r: f"{r['kind']}/{r['metadata']['name']}")
def test_no_rbac_rule_uses_a_wildcard_or_a_privilege_granting_verb(role: Obj) -> None:
    for rule in rules_of(role):
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in value for value in rule.get(field) or []), f"{field} in {rule}"
        assert not DANGEROUS_VERBS & set(rule["verbs"])
        assert "nonResourceURLs" not in rule
    assert "aggregationRule" not in role


def test_every_binding_gives_a_shipped_role_to_a_shipped_service_account() -> None:
    objects = installed()
    accounts = {(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in of_kind(objects, "ServiceAccount")}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for binding in of_kind(objects, kind):
            ref = binding["roleRef"]
            role = only(objects, ref["kind"], ref["name"])
            if kind == "RoleBinding" and ref["kind"] == "Role":
                assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
            for subject in binding["subjects"]:
                assert subject["kind"] == "ServiceAccount"
                assert (subject["namespace"], subject["name"]) in accounts


def _pinned(resource: str) -> list[Obj]:
    return [rule for role in roles() for rule in rules_of(role) if resource in rule["resources"]]


@pytest.mark.parametrize("resource", ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"])
def test_webhook_configurations_are_reachable_only_by_the_names_that_ship(resource: str) -> None:
    kind = {"mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
            "validatingwebhookconfigurations": "ValidatingWebhookConfiguration"}[resource]
    shipped = {c["metadata"]["name"] for c in of_kind(installed(), kind)}
    rules = _pinned(resource)
    assert rules
    for rule in rules:
        assert set(rule.get("resourceNames") or []) == shipped
        assert set(rule["verbs"]) <= {"get", "update", "patch"}


def test_leases_are_only_in_the_injector_namespace_and_only_created_without_a_name() -> None:
    namespace = only(installed(), "Namespace")["metadata"]["name"]
    for role in roles():
        for rule in rules_of(role):
            if "leases" not in rule["resources"]:
                continue
            assert role["kind"] == "Role"
            assert role["metadata"]["namespace"] == namespace
            assert rule.get("resourceNames") or set(rule["verbs"]) == {"create"}


def test_the_bootstrap_job_reads_and_updates_only_the_webhook_ca_and_serving_secrets() -> None:
    objects = installed()
    pod = only(objects, "Job")["spec"]["template"]["spec"]
    args = _parser().parse_args(pod["containers"][0]["args"])
    role = only(objects, "Role", pod["serviceAccountName"])
    secret_rules = [r for r in rules_of(role) if "secrets" in r["resources"]]
    named = [set(r["resourceNames"]) for r in secret_rules if r.get("resourceNames")]
    assert named == [{args.webhook_secret, WebhookSettings().ca.secret_name}]
    assert [set(r["verbs"]) for r in secret_rules if not r.get("resourceNames")] == [{"create"}]
