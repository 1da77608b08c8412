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

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, namespace
from tests.reconcile.test_hub_members import cli, finished, register
from tests.shipping.rbac import Call, authorized, grants_for
from tests.shipping.support import ROOT, Obj, kubectl, of_kind, only, render, render_with_components
from tests.shipping.test_reconciler_policy import ADMIN, RECONCILER, TENANT, changed, refusals, request, thing
from tests.shipping.test_schema import validate
from tls_injector.cli.parser import build_parser
from tls_injector.kube.config import member_client
from tls_injector.names import (
    CLIENT_INTERMEDIATE_CA_RECORD,
    CLIENT_INTERMEDIATE_CA_SECRET,
    FEDERATION_STATUS_CONFIGMAP,
    FORCE_REPLACE_ANNOTATION,
    INTERMEDIATE_CA_RECORD,
    INTERMEDIATE_CA_SECRET,
    MEMBER_KUBECONFIG_KEY,
    MEMBER_LABEL,
)
from tls_injector.reconcile.core.ownership import owner_labels

MEMBER = "manifests/components/member"
NAMESPACE = "tls-injector"
HUB_ACCOUNT = "tls-injector-hub"
HUB = f"system:serviceaccount:{NAMESPACE}:{HUB_ACCOUNT}"
# What the hub writes into a member (app/reconcile/federation/hub.py; docs/multicluster.md).
INTERMEDIATES = (INTERMEDIATE_CA_SECRET, CLIENT_INTERMEDIATE_CA_SECRET)
RECORDS = (INTERMEDIATE_CA_RECORD, CLIENT_INTERMEDIATE_CA_RECORD)  # its public records of them, beside


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


HUB_MAY = [Call(verb, "", "secrets", NAMESPACE, name) for name in INTERMEDIATES
           for verb in ("create", "update", "delete")]
HUB_MAY += [Call(verb, "", "configmaps", NAMESPACE, name) for name in RECORDS for verb in ("get", "create", "update")]
HUB_MAY.append(Call("get", "", "configmaps", NAMESPACE, FEDERATION_STATUS_CONFIGMAP))
HUB_MAY_NOT = [
    # No read of any Secret, its own intermediates' included (their keys), and no patch (it answers with
    # the whole object, so it reads as well).
    *(Call(verb, "", "secrets", NAMESPACE, name) for name in INTERMEDIATES for verb in ("get", "patch")),
    *(Call("patch", "", "configmaps", NAMESPACE, name) for name in RECORDS),
    Call("get", "", "secrets", NAMESPACE, "tls-injector-ca"),
    Call("get", "", "secrets", NAMESPACE, "tls-injector-hub-token"),
    Call("delete", "", "secrets", NAMESPACE, "tls-injector-ca"),
    Call("list", "", "secrets", NAMESPACE, None),
    Call("watch", "", "secrets", NAMESPACE, None),
    Call("update", "", "configmaps", NAMESPACE, FEDERATION_STATUS_CONFIGMAP),
    Call("get", "", "configmaps", NAMESPACE, "tls-injector-trust-bundle"),
    Call("update", "", "configmaps", NAMESPACE, "tls-injector-trust-bundle"),
    Call("create", "", "secrets", "team-a", INTERMEDIATES[0]),
    Call("get", "", "secrets", "team-a", INTERMEDIATES[0]),
    Call("create", "", "events", NAMESPACE, None),
    Call("list", "", "namespaces", None, None),
]


@pytest.mark.parametrize("call", HUB_MAY, ids=str)
def test_the_hubs_account_may_make_the_hubs_calls_in_the_members_namespace(call: Call) -> None:
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
        *(("secrets", verb, name) for name in INTERMEDIATES for verb in ("update", "delete")),
        *(("configmaps", verb, name) for name in RECORDS for verb in ("get", "update")),
        ("configmaps", "get", FEDERATION_STATUS_CONFIGMAP)}
    assert not [g for g in grants if g.resource == "secrets" and g.verb in ("get", "list", "watch", "patch")]


OURS = owner_labels("intermediate")
TLS = "kubernetes.io/tls"  # the type the hub writes its intermediates as (app/reconcile/federation/issuance.py)
INTERMEDIATE = thing("Secret", INTERMEDIATES[0], NAMESPACE, OURS, secret_type=TLS)
CLIENT_INTERMEDIATE = thing("Secret", INTERMEDIATES[1], NAMESPACE, OURS, secret_type=TLS)
FOREIGN = thing("Secret", INTERMEDIATES[0], NAMESPACE, secret_type=TLS)  # someone else's, not labelled ours
REPLACE = {FORCE_REPLACE_ANNOTATION: "1"}
RECORD = thing("ConfigMap", RECORDS[0], NAMESPACE, owner_labels("intermediate-record"))
CLIENT_RECORD = thing("ConfigMap", RECORDS[1], NAMESPACE, owner_labels("intermediate-record"))

HUB_WRITES = [
    ("creates the serving intermediate", request("CREATE", HUB, new=INTERMEDIATE)),
    ("creates the client intermediate", request("CREATE", HUB, new=CLIENT_INTERMEDIATE)),
    ("renews the serving intermediate",
     request("UPDATE", HUB, new=changed(INTERMEDIATE, data={"tls.crt": "bmV3"}), old=INTERMEDIATE)),
    ("replaces a foreign intermediate a person annotated force-replace",
     request("UPDATE", HUB, new=INTERMEDIATE, old=changed(FOREIGN, annotations=REPLACE))),
    ("deletes an intermediate of another type annotated force-replace",
     request("DELETE", HUB, old=changed(FOREIGN, annotations=REPLACE))),
    ("creates its record of the serving intermediate", request("CREATE", HUB, new=RECORD)),
    ("updates its record of the client intermediate",
     request("UPDATE", HUB, new=changed(CLIENT_RECORD, annotations={"x": "1"}), old=CLIENT_RECORD)),
]
HUB_REFUSED = [
    ("plants a CA Secret of another name", request("CREATE", HUB, new=thing("Secret", "tls-injector-ca", NAMESPACE,
                                                                             owner_labels("ca")))),
    ("creates an intermediate without our label", request("CREATE", HUB, new=FOREIGN)),
    ("overwrites an intermediate it did not issue, not annotated", request("UPDATE", HUB, new=INTERMEDIATE,
                                                                          old=FOREIGN)),
    ("strips our label from an intermediate", request("UPDATE", HUB, new=FOREIGN, old=INTERMEDIATE)),
    ("strips our label from an annotated one",
     request("UPDATE", HUB, new=changed(FOREIGN, annotations=REPLACE), old=changed(FOREIGN, annotations=REPLACE))),
    ("writes an intermediate in another namespace",
     request("CREATE", HUB, new=thing("Secret", INTERMEDIATES[0], "team-a", OURS))),
    ("squats the trust bundle's name", request("CREATE", HUB, new=thing("ConfigMap", "tls-injector-trust-bundle",
                                                                         "team-a", owner_labels("bundle")))),
    ("creates a ConfigMap in the namespace", request("CREATE", HUB, new=thing(
        "ConfigMap", INTERMEDIATES[0], NAMESPACE, owner_labels("bundle")))),
    ("writes an unlabelled Secret of its own", request("CREATE", HUB, new=thing("Secret", "x", NAMESPACE))),
    ("deletes an intermediate nobody asked to replace", request("DELETE", HUB, old=INTERMEDIATE)),
    ("overwrites a ConfigMap squatting its record's name",
     request("UPDATE", HUB, new=RECORD, old=thing("ConfigMap", RECORDS[0], NAMESPACE))),
    ("deletes its record", request("DELETE", HUB, old=changed(RECORD, annotations=REPLACE))),
    ("creates its record in another namespace",
     request("CREATE", HUB, new=thing("ConfigMap", RECORDS[0], "team-a", owner_labels("intermediate-record")))),
    ("deletes another Secret annotated force-replace",
     request("DELETE", HUB, old=changed(thing("Secret", "tls-injector-ca", NAMESPACE, owner_labels("ca")),
                                        annotations=REPLACE))),
]
OTHERS = [
    ("a tenant plants an intermediate", request("CREATE", TENANT, new=INTERMEDIATE), False),
    ("a cluster admin edits an intermediate's key",
     request("UPDATE", ADMIN, new=changed(INTERMEDIATE, data={"tls.key": "ZXZpbA=="}), old=INTERMEDIATE), False),
    ("a person asks the hub to replace its intermediate",
     request("UPDATE", ADMIN, new=changed(INTERMEDIATE, annotations=REPLACE), old=INTERMEDIATE), True),
    ("a person asks the hub to replace a foreign one",
     request("UPDATE", ADMIN, new=changed(FOREIGN, annotations=REPLACE), old=FOREIGN), True),
    ("the member's own reconciler may not write one", request("CREATE", RECONCILER, new=FOREIGN), False),
    ("the member's own reconciler writes its report on the roots", request("CREATE", RECONCILER, new=thing(
        "ConfigMap", FEDERATION_STATUS_CONFIGMAP, NAMESPACE, owner_labels("federation-status"))), True),
    ("the hub may not write the member's report", request("CREATE", HUB, new=thing(
        "ConfigMap", FEDERATION_STATUS_CONFIGMAP, NAMESPACE, owner_labels("federation-status"))), False),
]


@pytest.mark.parametrize(("case", "review"), HUB_WRITES, ids=[c for c, _ in HUB_WRITES])
def test_in_a_member_the_policies_let_the_hub_write_its_objects(case: str, review: Obj) -> None:
    assert refusals(review, policies(member())) == [], case


@pytest.mark.parametrize(("case", "review"), HUB_WRITES[:3], ids=[c for c, _ in HUB_WRITES[:3]])
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
    [text] = refusals(request("CREATE", HUB, new=thing("Secret", "tls-injector-ca", NAMESPACE, owner_labels("ca"),
                                                         secret_type=TLS)),
                      policies(member()))
    assert all(name in text for name in INTERMEDIATES), text
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


def test_the_policies_name_the_account_the_role_is_bound_to_and_the_code_s_names() -> None:
    objects = member()
    [subject] = only(objects, "RoleBinding", HUB_ACCOUNT)["subjects"]
    assert f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == HUB
    text = (ROOT / MEMBER / "hub-admission-policy.yaml").read_text()
    assert f"'{HUB}'" in text
    assert f"'{HUB}'" in (ROOT / MEMBER / "reserved-objects.yaml").read_text()
    assert f"'{FORCE_REPLACE_ANNOTATION}'" in text
    assert f"['{INTERMEDIATES[0]}', '{INTERMEDIATES[1]}']" in text
    assert set(only(objects, "Role", HUB_ACCOUNT)["rules"][1]["resourceNames"]) == set(INTERMEDIATES)


Snapshot = dict[tuple[str, str, str], Obj]


def _stored(emu: Emulator) -> Snapshot:
    return {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o
            for resource in ("secrets", "configmaps") for o in emu.objects(resource)}


def _writes(before: Snapshot, after: Snapshot) -> list[Obj]:
    """The hub's writes into a member as the admission requests the member's API server judges (an object
    whose uid changed was deleted and created again)."""
    found = [request("CREATE", HUB, new=after[k]) for k in after.keys() - before.keys()]
    found += [request("DELETE", HUB, old=before[k]) for k in before.keys() - after.keys()]
    for k in after.keys() & before.keys():
        old, new = before[k], after[k]
        if old["metadata"]["uid"] != new["metadata"]["uid"]:
            found += [request("DELETE", HUB, old=old), request("CREATE", HUB, new=new)]
        elif old["metadata"].get("resourceVersion") != new["metadata"].get("resourceVersion"):
            found.append(request("UPDATE", HUB, new=new, old=old))
    return found


def test_every_call_and_write_the_real_hub_makes_in_a_member_is_allowed_by_the_member_install() -> None:
    """`reconcile --once --hub` (the real CLI) against a hub emulator with one member registered; the
    member's emulator holds a foreign intermediate of another type that a person asked to have replaced
    (the hub deletes and creates it) and no client intermediate (created). Every call in the member's
    request log must be allowed by the member's Role for the hub's account, every write must pass the
    member's admission policies, and every call in the hub by the base RBAC of the reconciler's account."""
    with running_emulator(seed=1) as hub, running_emulator(seed=2) as east:
        for emu in (hub, east):
            namespace(emu, OWN_NS)
        register(hub, "east", east.kubeconfig())
        foreign = {**changed(FOREIGN, annotations=REPLACE), "type": "Opaque"}
        east.add(foreign)
        before = _stored(east)
        code, out, err = finished(cli(hub.url, "--hub"))[0]
        assert code == 0, (out, err)
        after = _stored(east)
        assert after[("Secret", NAMESPACE, INTERMEDIATES[0])]["type"] == "kubernetes.io/tls"
        writes = _writes(before, after)
        assert {(w["operation"], w["name"]) for w in writes} == {
            ("DELETE", INTERMEDIATES[0]), ("CREATE", INTERMEDIATES[0]), ("CREATE", INTERMEDIATES[1]),
            *(("CREATE", name) for name in RECORDS)}
        # Someone changes the client intermediate's roots in the hub's record: the next pass updates the
        # record only (a roots change rewrites no key).
        tampered = after[("ConfigMap", NAMESPACE, RECORDS[1])]
        tampered["data"]["ca.crt"] = "not the roots"
        east.store.update(east.resource("configmaps"), NAMESPACE, RECORDS[1], tampered)
        before = _stored(east)
        code, out, err = finished(cli(hub.url, "--hub"))[0]
        assert code == 0, (out, err)
        second = _writes(before, _stored(east))
        assert [(w["operation"], w["name"]) for w in second] == [("UPDATE", RECORDS[1])]
        writes += second
        assert [(w["operation"], w["name"], refusals(w, policies(member()))) for w in writes
                if refusals(w, policies(member()))] == []
        member_grants = grants_for(member(), namespace=NAMESPACE, account=HUB_ACCOUNT)
        calls = [Call.of(r.verb, r.resource, r.namespace, r.name) for r in east.log]
        assert [c for c in calls if not authorized(member_grants, c)] == []
        # And the other way round: every verb the Role grants was used (else it is privilege to spare).
        assert {(g.resource, g.verb) for g in member_grants} == {(c.resource, c.verb) for c in calls}
        hub_grants = grants_for(render_with_components("manifests/base", HUB_COMPONENT), namespace=NAMESPACE,
                                account="tls-injector-reconciler")
        hub_calls = [Call.of(r.verb, r.resource, r.namespace, r.name) for r in hub.log]
        assert Call("list", "", "secrets", NAMESPACE, None) in hub_calls
        assert [c for c in hub_calls if not authorized(hub_grants, c)] == []


HUB_COMPONENT = "manifests/components/hub"


def test_the_hub_component_starts_the_reconciler_with_hub_and_changes_nothing_else() -> None:
    base = render(ROOT / "manifests/base")
    hub = render_with_components("manifests/base", HUB_COMPONENT)
    deployment = only(hub, "Deployment", "tls-injector-reconciler")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert build_parser().parse_args(args).hub is True
    assert build_parser().parse_args(only(base, "Deployment", "tls-injector-reconciler")["spec"]["template"]["spec"][
        "containers"][0]["args"]).hub is False
    args.remove("--hub")
    assert hub == base


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
    assert secret["metadata"]["labels"] == {MEMBER_LABEL: "member-a"}
    assert list(secret["data"]) == [MEMBER_KUBECONFIG_KEY]
    raw = base64.b64decode(secret["data"][MEMBER_KUBECONFIG_KEY])
    member_client(raw).close()  # the hub accepts it: inline token and CA, an https server
    config = yaml.safe_load(raw)
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
