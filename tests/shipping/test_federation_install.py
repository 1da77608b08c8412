"""The install of a federation's roles (docs/multicluster.md): manifests/components/member gives the hub's
account in a member exactly the writes the hub makes there, and the member's admission policies let that
account write exactly those objects; manifests/components/hub turns the reconciler into the hub.

The policies are evaluated as tests/shipping/test_reconciler_policy.py evaluates the base's: their CEL on
AdmissionRequest-shaped inputs, taken from the rendering an operator applies (base + component).
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from app.reconcile.ownership import owner_labels
from tests.kubeapi import Emulator
from tests.shipping.rbac import Call, authorized, grants_for
from tests.shipping.support import ROOT, Obj, kubectl, of_kind, only, render, render_with_components
from tests.shipping.test_reconciler_policy import ADMIN, RECONCILER, TENANT, changed, refusals, request, thing
from tests.shipping.test_schema import validate

MEMBER = "manifests/components/member"
NAMESPACE = "tls-injector"
HUB_ACCOUNT = "tls-injector-hub"
HUB = f"system:serviceaccount:{NAMESPACE}:{HUB_ACCOUNT}"
# What the hub writes into a member (the design of issue 28 parts 2-3; docs/multicluster.md).
INTERMEDIATES = ("tls-injector-intermediate-ca", "tls-injector-client-intermediate-ca")
ROOTS = "tls-injector-federation-roots"


def member() -> list[Obj]:
    return render_with_components("manifests/base", MEMBER)


def policies(objects: list[Obj]) -> list[Obj]:
    return list(of_kind(objects, "ValidatingAdmissionPolicy"))


@pytest.mark.parametrize("base", ["manifests/base", "manifests/overlays/example"])
def test_a_member_rendering_validates_strictly_and_holds_no_object_twice(base: str) -> None:
    objects = render_with_components(base, MEMBER)
    for obj in objects:
        validate(obj)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys))
    added = set(keys) - {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                                 for o in render(ROOT / base)}
    assert added == {("ServiceAccount", NAMESPACE, HUB_ACCOUNT), ("Secret", NAMESPACE, "tls-injector-hub-token"),
                     ("Role", NAMESPACE, HUB_ACCOUNT), ("RoleBinding", NAMESPACE, HUB_ACCOUNT),
                     ("ValidatingAdmissionPolicy", None, "tls-injector.hub-reach"),
                     ("ValidatingAdmissionPolicyBinding", None, "tls-injector.hub-reach")}


def test_the_hubs_token_is_for_the_hubs_account_and_no_pod_mounts_that_account() -> None:
    objects = member()
    token = only(objects, "Secret", "tls-injector-hub-token")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == HUB_ACCOUNT
    # Not reserved to the reconciler: the operator applies it and the token controller fills it in.
    assert "app.kubernetes.io/managed-by" not in token["metadata"]["labels"]
    assert only(objects, "ServiceAccount", HUB_ACCOUNT)["automountServiceAccountToken"] is False
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"]
    assert pods
    assert all(spec["serviceAccountName"] != HUB_ACCOUNT for spec in pods)


HUB_MAY = [Call(verb, "", "secrets", NAMESPACE, name) for name in INTERMEDIATES for verb in ("get", "create", "update")]
HUB_MAY += [Call(verb, "", "configmaps", NAMESPACE, ROOTS) for verb in ("get", "create", "update")]
HUB_MAY_NOT = [
    Call("get", "", "secrets", NAMESPACE, "tls-injector-ca"),
    Call("get", "", "secrets", NAMESPACE, "tls-injector-hub-token"),
    Call("list", "", "secrets", NAMESPACE, None),
    Call("watch", "", "configmaps", NAMESPACE, None),
    Call("update", "", "configmaps", NAMESPACE, "tls-injector-trust-bundle"),
    Call("delete", "", "secrets", NAMESPACE, INTERMEDIATES[0]),
    Call("create", "", "secrets", "team-a", INTERMEDIATES[0]),
    Call("get", "", "secrets", "team-a", INTERMEDIATES[0]),
    Call("create", "", "events", NAMESPACE, None),
    Call("list", "", "namespaces", None, None),
]


@pytest.mark.parametrize("call", HUB_MAY, ids=str)
def test_the_hubs_account_may_make_the_hubs_writes_in_the_members_namespace(call: Call) -> None:
    assert authorized(grants_for(member(), namespace=NAMESPACE, account=HUB_ACCOUNT), call)


@pytest.mark.parametrize("call", HUB_MAY_NOT, ids=str)
def test_the_hubs_account_may_do_nothing_else(call: Call) -> None:
    assert not authorized(grants_for(member(), namespace=NAMESPACE, account=HUB_ACCOUNT), call)


def test_the_hubs_grants_are_in_its_namespace_only_and_pinned_by_name_except_create() -> None:
    grants = grants_for(member(), namespace=NAMESPACE, account=HUB_ACCOUNT)
    assert grants
    assert {g.namespace for g in grants} == {NAMESPACE}
    assert {(g.resource, g.verb) for g in grants if g.names is None} == {("secrets", "create"),
                                                                         ("configmaps", "create")}
    assert {(g.resource, g.verb, n) for g in grants if g.names is not None for n in g.names} == {
        *((r, v, n) for n in INTERMEDIATES for r, v in (("secrets", "get"), ("secrets", "update"))),
        ("configmaps", "get", ROOTS), ("configmaps", "update", ROOTS)}


INTERMEDIATE = thing("Secret", INTERMEDIATES[0], NAMESPACE, owner_labels("ca"))
CLIENT_INTERMEDIATE = thing("Secret", INTERMEDIATES[1], NAMESPACE, owner_labels("ca"))
ROOTS_MAP = thing("ConfigMap", ROOTS, NAMESPACE, owner_labels("bundle"))
UNLABELLED_INTERMEDIATE = thing("Secret", INTERMEDIATES[0], NAMESPACE)
ACK = {"tls-injector.io/in-every-bundle-since-0123456789abcdef": "2026-11-25T20:00:00Z"}

HUB_WRITES = [
    ("creates the serving intermediate", request("CREATE", HUB, new=INTERMEDIATE)),
    ("creates the client intermediate", request("CREATE", HUB, new=CLIENT_INTERMEDIATE)),
    ("creates the root bundles", request("CREATE", HUB, new=ROOTS_MAP)),
    ("renews the serving intermediate",
     request("UPDATE", HUB, new=changed(INTERMEDIATE, data={"tls.crt": "bmV3"}), old=INTERMEDIATE)),
    ("publishes a new root beside the member's acknowledgements",
     request("UPDATE", HUB, new=changed(ROOTS_MAP, annotations=ACK, data={"ca-bundle.crt": "bmV3"}),
             old=changed(ROOTS_MAP, annotations=ACK))),
]
HUB_REFUSED = [
    ("plants a CA Secret of another name", request("CREATE", HUB, new=thing("Secret", "tls-injector-ca", NAMESPACE,
                                                                             owner_labels("ca")))),
    ("creates an intermediate without our label", request("CREATE", HUB, new=UNLABELLED_INTERMEDIATE)),
    ("overwrites an intermediate it did not issue (unlabelled)",
     request("UPDATE", HUB, new=INTERMEDIATE, old=UNLABELLED_INTERMEDIATE)),
    ("strips our label from an intermediate",
     request("UPDATE", HUB, new=UNLABELLED_INTERMEDIATE, old=INTERMEDIATE)),
    ("writes an intermediate in another namespace",
     request("CREATE", HUB, new=thing("Secret", INTERMEDIATES[0], "team-a", owner_labels("ca")))),
    ("squats the trust bundle's name", request("CREATE", HUB, new=thing("ConfigMap", "tls-injector-trust-bundle",
                                                                         "team-a", owner_labels("bundle")))),
    ("creates a ConfigMap under a Secret's name", request("CREATE", HUB, new=thing(
        "ConfigMap", INTERMEDIATES[0], NAMESPACE, owner_labels("bundle")))),
    ("writes an unlabelled Secret of its own", request("CREATE", HUB, new=thing("Secret", "x", NAMESPACE))),
    ("deletes an intermediate", request("DELETE", HUB, old=INTERMEDIATE)),
]
OTHERS = [
    ("a tenant plants an intermediate", request("CREATE", TENANT, new=INTERMEDIATE), False),
    ("a cluster admin edits the root bundles",
     request("UPDATE", ADMIN, new=changed(ROOTS_MAP, data={"ca-bundle.crt": "ZXZpbA=="}), old=ROOTS_MAP), False),
    ("the member's reconciler acknowledges a root on the root bundles",
     request("UPDATE", RECONCILER, new=changed(ROOTS_MAP, annotations=ACK), old=ROOTS_MAP), True),
]


@pytest.mark.parametrize(("case", "review"), HUB_WRITES, ids=[c for c, _ in HUB_WRITES])
def test_in_a_member_the_policies_let_the_hub_write_its_objects(case: str, review: Obj) -> None:
    assert refusals(review, policies(member())) == [], case


@pytest.mark.parametrize(("case", "review"), HUB_WRITES, ids=[c for c, _ in HUB_WRITES])
def test_without_the_member_component_the_base_policies_refuse_the_hubs_writes(case: str, review: Obj) -> None:
    found = refusals(review, policies(render(ROOT / "manifests/base")))
    assert found, case
    assert all(HUB in text for text in found), found


@pytest.mark.parametrize(("case", "review"), HUB_REFUSED, ids=[c for c, _ in HUB_REFUSED])
def test_in_a_member_the_hub_is_refused_everything_else(case: str, review: Obj) -> None:
    found = refusals(review, policies(member()))
    assert found, f"the hub {case}: allowed"
    assert all("tls-injector hub" in text for text in found), found


@pytest.mark.parametrize(("case", "review", "allowed"), OTHERS, ids=[c for c, _, _ in OTHERS])
def test_in_a_member_the_objects_stay_reserved_from_everyone_else(case: str, review: Obj, allowed: bool) -> None:
    assert (refusals(review, policies(member())) == []) is allowed, case


def test_a_refusal_says_what_the_hub_may_write() -> None:
    [text] = refusals(request("CREATE", HUB, new=thing("Secret", "tls-injector-ca", NAMESPACE, owner_labels("ca"))),
                      policies(member()))
    assert all(name in text for name in (*INTERMEDIATES, ROOTS)), text
    assert f"secrets {NAMESPACE}/tls-injector-ca" in text


def test_the_member_component_keeps_every_condition_of_the_reserved_objects_policy_and_binds_hub_reach_to_deny(
) -> None:
    base = only(render(ROOT / "manifests/base"), "ValidatingAdmissionPolicy", "tls-injector.reserved-objects")
    objects = member()
    patched = only(objects, "ValidatingAdmissionPolicy", "tls-injector.reserved-objects")
    assert patched["spec"]["matchConditions"][:-1] == base["spec"]["matchConditions"]
    assert {k: v for k, v in patched["spec"].items() if k != "matchConditions"} == {
        k: v for k, v in base["spec"].items() if k != "matchConditions"}
    binding = only(objects, "ValidatingAdmissionPolicyBinding", "tls-injector.hub-reach")
    assert binding["spec"] == {"policyName": "tls-injector.hub-reach", "validationActions": ["Deny"]}


def test_the_policies_name_the_account_the_role_is_bound_to() -> None:
    objects = member()
    [subject] = only(objects, "RoleBinding", HUB_ACCOUNT)["subjects"]
    assert f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == HUB
    text = (ROOT / MEMBER / "hub-admission-policy.yaml").read_text()
    assert f"'{HUB}'" in text
    assert f"'{HUB}'" in (ROOT / MEMBER / "reserved-objects.yaml").read_text()


SCRIPT = ROOT / MEMBER / "member-secret.sh"
CLUSTER_CA = b"-----BEGIN CERTIFICATE-----\nMIIBmember\n-----END CERTIFICATE-----\n"


def _token_secret(data: dict[str, bytes]) -> Obj:
    token = only(member(), "Secret", "tls-injector-hub-token")
    return {**token, "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def _run_script(emu: Emulator, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script as an operator runs it: kubectl on PATH, its kubeconfig naming the member (the emulator)."""
    env = {**os.environ, "KUBECONFIG": str(emu.write_kubeconfig(tmp_path / "member.kubeconfig")),
           "PATH": f"{Path(kubectl()).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False, timeout=60)


def test_the_script_prints_the_hubs_member_secret_with_a_kubeconfig_for_the_hubs_token(
        kubeapi: Emulator, tmp_path: Path) -> None:
    kubeapi.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    # As the token controller leaves it once the member component is applied.
    kubeapi.add(_token_secret({"token": b"eyJhbGciOi.hub.token", "ca.crt": CLUSTER_CA, "namespace": b"tls-injector"}))
    result = _run_script(kubeapi, tmp_path, "member-a", "https://member-a.example:6443")
    assert result.returncode == 0, result.stderr
    secret = yaml.safe_load(result.stdout)
    validate(secret)
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["metadata"]["labels"] == {"tls-injector.io/member": "member-a"}
    assert list(secret["data"]) == ["kubeconfig"]
    config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    [cluster], [user], [context] = config["clusters"], config["users"], config["contexts"]
    assert cluster["cluster"]["server"] == "https://member-a.example:6443"
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == CLUSTER_CA
    assert user["user"] == {"token": "eyJhbGciOi.hub.token"}
    assert context["context"] == {"cluster": cluster["name"], "user": user["name"], "namespace": NAMESPACE}
    assert config["current-context"] == context["name"]
    assert "eyJhbGciOi" not in result.stderr


@pytest.mark.parametrize(("args", "status", "says"), [
    (["Member_A", "https://a.example:6443"], 2, "not a DNS-1123 label"),
    (["a" * 64, "https://a.example:6443"], 2, "not a DNS-1123 label"),
    (["member-a", "http://a.example:6443"], 2, "must be an https:// URL"),
    (["member-a"], 2, "usage:"),
    (["member-a", "https://a.example:6443"], 1, "has no token or ca.crt yet"),
])
def test_the_script_refuses_with_a_reason(kubeapi: Emulator, tmp_path: Path, args: list[str], status: int,
                                          says: str) -> None:
    kubeapi.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kubeapi.add(_token_secret({}))  # not filled in yet
    result = _run_script(kubeapi, tmp_path, *args)
    assert (result.returncode, result.stdout) == (status, "")
    assert says in result.stderr
