"""The shipped ValidatingAdmissionPolicies that reserve the reconciler's objects and narrow its reach
(manifests/base/reconciler-admission-policy.yaml), evaluated as the apiserver evaluates them: the
request must match the policy's resource rules and every matchCondition, then each validation runs with
the policy's variables; false or an evaluation error refuses (failurePolicy Fail). The CEL is the same
library the webhook's rules use; the inputs are AdmissionRequest-shaped (`request`, `object`,
`oldObject`), one per case an attacker or the reconciler would send.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, deployment, namespace, reconciler, small_cluster
from tests.reconcile.test_rotation import force_replace
from tests.shipping.support import ROOT, Obj, installed, load_docs, of_kind, only, render
from tls_injector.kube import DEPLOYMENTS, KubeApi
from tls_injector.names import TRUST_BUNDLE_CONFIGMAP
from tls_injector.reconcile.core.ownership import MANAGED_BY_LABEL, MANAGER, owner_labels
from tls_injector.rules.cel import Environment, EvalError, to_cel

POLICY_FILE = ROOT / "manifests" / "base" / "reconciler-admission-policy.yaml"
POLICIES = [d for d in load_docs(POLICY_FILE) if d["kind"] == "ValidatingAdmissionPolicy"]
ENV = Environment(["request", "object", "oldObject", "variables"])

RECONCILER = "system:serviceaccount:tls-injector:tls-injector-reconciler"
BOOTSTRAP = "system:serviceaccount:tls-injector:tls-injector-bootstrap"
TENANT = "system:serviceaccount:team-a:default"
ADMIN = "kubernetes-admin"
GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
OURS = owner_labels("leaf")


def thing(kind: str, name: str, namespace: str = "team-a", labels: dict[str, str] | None = None, *,
          secret_type: str = "Opaque", annotations: dict[str, str] | None = None) -> Obj:
    """An object as admission sees it: a Secret always has a `type`, since the apiserver defaults an
    omitted one to Opaque before any admission plugin runs."""
    metadata: Obj = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    typed = {"type": secret_type} if kind == "Secret" else {}
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "data": {"k": "dg=="}, **typed}


def request(operation: str, user: str, *, new: Obj | None = None, old: Obj | None = None) -> Obj:
    """An AdmissionRequest as the apiserver builds it (object is null on DELETE, oldObject on CREATE)."""
    subject = new or old
    assert subject is not None
    kind, meta = subject["kind"], subject["metadata"]
    groups = ["system:masters", "system:authenticated"] if user == ADMIN else ["system:authenticated"]
    return {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "name": meta["name"], "namespace": meta["namespace"], "operation": operation,
            "userInfo": {"username": user, "groups": groups}, "object": new, "oldObject": old, "dryRun": False}


def applies(policy: Obj, review: Obj) -> bool:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    resource = review["resource"]
    if not any(_covers(r["apiGroups"], resource["group"]) and _covers(r["apiVersions"], resource["version"])
               and _covers(r["resources"], resource["resource"]) and _covers(r["operations"], review["operation"])
               for r in rules):
        return False
    data = cel_data(review)
    return all(ENV.compile_bool(c["expression"]).evaluate(data) is True for c in policy["spec"]["matchConditions"])


def _covers(listed: list[str], value: str) -> bool:
    """A resource rule's field as the apiserver reads it: `*` matches every value."""
    return "*" in listed or value in listed


def cel_data(review: Obj) -> dict[str, Any]:
    return {"request": to_cel(review), "object": to_cel(review["object"]), "oldObject": to_cel(review["oldObject"])}


def refusals(review: Obj, policies: list[Obj] | None = None) -> list[str]:
    """The messages of every validation that refuses `review`, over every policy (default: the base's
    two) that applies."""
    found = []
    for policy in (p for p in (POLICIES if policies is None else policies) if applies(p, review)):
        data = cel_data(review)
        data["variables"] = {}
        for variable in policy["spec"]["variables"]:  # in order: a variable may use the ones before it
            data["variables"][variable["name"]] = ENV.compile_any(variable["expression"]).value(data)
        assert not [v for v in data["variables"].values() if isinstance(v, EvalError)], data["variables"]
        for validation in policy["spec"]["validations"]:
            verdict = ENV.compile_bool(validation["expression"]).evaluate(data)
            assert not isinstance(verdict, EvalError), (validation["expression"], verdict)
            if verdict is not True:
                found.append(message(validation, data))
    return found


def message(validation: Obj, data: dict[str, Any]) -> str:
    if "messageExpression" in validation:
        text = ENV.compile_any(validation["messageExpression"]).value(data)
        assert isinstance(text, str), text
        return text
    return str(validation["message"])


SQUAT = thing("ConfigMap", TRUST_BUNDLE_CONFIGMAP)
SQUAT_LABELLED = thing("ConfigMap", TRUST_BUNDLE_CONFIGMAP, labels=owner_labels("bundle"))
LEAF = thing("Secret", "web-tls", labels=OURS, secret_type="kubernetes.io/tls")
STRIPPED = thing("Secret", "web-tls", labels={}, secret_type="kubernetes.io/tls")
PLAIN_SECRET = thing("Secret", "db-password", labels={"app": "db"})
PLAIN_CONFIGMAP = thing("ConfigMap", "app-config")
HELM_LABELLED = thing("ConfigMap", "chart-values", labels={MANAGED_BY_LABEL: "Helm"})
CA = thing("Secret", "tls-injector-ca", "tls-injector", owner_labels("ca"))


def changed(obj: Obj, *, annotations: dict[str, str] | None = None, data: dict[str, str] | None = None,
            binary: dict[str, str] | None = None) -> Obj:
    """`obj` as an UPDATE would leave it: annotations added, data replaced, binaryData added."""
    metadata = {**obj["metadata"], "annotations": {**obj["metadata"].get("annotations", {}), **(annotations or {})}}
    return {**obj, "metadata": metadata, **({"data": data} if data is not None else {}),
            **({"binaryData": binary} if binary is not None else {})}


RENEW = {"tls-injector.io/force-renew": "2026-11-25"}
REPLACE = {"tls-injector.io/force-replace": "1"}
WEBHOOK_TLS = thing("Secret", "tls-injector-webhook-tls", "tls-injector", owner_labels("webhook"),
                    secret_type="kubernetes.io/tls")

REFUSED = [
    ("a tenant squats the bundle's name without our label", request("CREATE", TENANT, new=SQUAT)),
    ("a tenant creates a bundle with our label", request("CREATE", TENANT, new=SQUAT_LABELLED)),
    ("a tenant plants a Secret with our label", request("CREATE", TENANT, new=LEAF)),
    ("a tenant edits a certificate Secret of ours",
     request("UPDATE", TENANT, new=changed(LEAF, data={"tls.crt": "ZXZpbA=="}), old=LEAF)),
    ("a tenant strips our label to take a Secret over", request("UPDATE", TENANT, new=STRIPPED, old=LEAF)),
    ("a tenant labels its own Secret as ours", request("UPDATE", TENANT, new=LEAF, old=STRIPPED)),
    ("a cluster admin writes the bundle by hand",
     request("UPDATE", ADMIN, new=changed(SQUAT_LABELLED, data={"ca-bundle.crt": "x"}), old=SQUAT_LABELLED)),
    ("the bootstrap Job writes a labelled Secret elsewhere", request("CREATE", BOOTSTRAP, new=LEAF)),
    ("a tenant renews its certificate and changes its key in the same update",
     request("UPDATE", TENANT, new=changed(LEAF, annotations=RENEW, data={"tls.key": "ZXZpbA=="}), old=LEAF)),
    ("a tenant adds a file beside the bundle with a renew annotation",
     request("UPDATE", TENANT, new=changed(SQUAT_LABELLED, annotations=RENEW, binary={"evil.crt": "ZXZpbA=="}),
             old=SQUAT_LABELLED)),
    ("a tenant changes another annotation of ours",
     request("UPDATE", TENANT, new=changed(LEAF, annotations={"tls-injector.io/issuer": "x"}), old=LEAF)),
    ("a tenant strips our label while asking to renew",
     request("UPDATE", TENANT, new=changed(STRIPPED, annotations=RENEW), old=LEAF)),
    ("the reconciler creates an unlabelled Secret", request("CREATE", RECONCILER, new=PLAIN_SECRET)),
    ("the reconciler overwrites a Secret it does not own", request("UPDATE", RECONCILER, new=LEAF, old=PLAIN_SECRET)),
    ("the reconciler drops its own label", request("UPDATE", RECONCILER, new=STRIPPED, old=LEAF)),
    ("the reconciler deletes a Secret it does not own", request("DELETE", RECONCILER, old=PLAIN_SECRET)),
    ("the reconciler takes over a squatted bundle", request("UPDATE", RECONCILER, new=SQUAT_LABELLED, old=SQUAT)),
]
ALLOWED = [
    ("a tenant writes its own ConfigMap", request("CREATE", TENANT, new=PLAIN_CONFIGMAP)),
    ("a tenant updates its own Secret", request("UPDATE", TENANT, new=PLAIN_SECRET, old=PLAIN_SECRET)),
    ("a tenant uses the managed-by label with another manager", request("CREATE", TENANT, new=HELM_LABELLED)),
    ("a tenant deletes its namespace's copy (the reconciler writes it again)", request("DELETE", TENANT, old=LEAF)),
    ("the namespace controller empties a namespace",
     request("DELETE", "system:serviceaccount:kube-system:namespace-controller", old=SQUAT_LABELLED)),
    ("the garbage collector orphans a leaf Secret", request("UPDATE", GARBAGE_COLLECTOR, new=LEAF, old=LEAF)),
    ("a workload's owner asks for a new certificate (force-renew)",
     request("UPDATE", TENANT, new=changed(LEAF, annotations=RENEW), old=LEAF)),
    ("an operator asks for a new CA (force-replace)", request("UPDATE", ADMIN, new=changed(CA, annotations=REPLACE),
                                                             old=CA)),
    ("the reconciler creates a bundle", request("CREATE", RECONCILER, new=SQUAT_LABELLED)),
    ("the reconciler renews a certificate", request("UPDATE", RECONCILER, new=LEAF, old=LEAF)),
    ("the reconciler removes a Secret no workload needs", request("DELETE", RECONCILER, old=LEAF)),
    ("the bootstrap Job writes the webhook's serving Secret", request("CREATE", BOOTSTRAP, new=WEBHOOK_TLS)),
    ("the bootstrap Job renews the webhook's serving Secret",
     request("UPDATE", BOOTSTRAP, new=WEBHOOK_TLS, old=WEBHOOK_TLS)),
]


@pytest.mark.parametrize(("case", "review"), REFUSED, ids=[c for c, _ in REFUSED])
def test_the_policies_refuse(case: str, review: Obj) -> None:
    found = refusals(review)
    assert found, f"{case}: allowed"
    assert all("tls-injector" in text for text in found), found


@pytest.mark.parametrize(("case", "review"), ALLOWED, ids=[c for c, _ in ALLOWED])
def test_the_policies_allow(case: str, review: Obj) -> None:
    assert refusals(review) == [], case


def test_a_refusal_names_the_requester_and_what_is_reserved() -> None:
    [text] = refusals(request("CREATE", TENANT, new=SQUAT))
    assert TENANT in text
    assert TRUST_BUNDLE_CONFIGMAP in text
    assert f"{MANAGED_BY_LABEL}={MANAGER}" in text


def test_the_policies_name_the_label_the_bundle_and_the_accounts_the_install_really_uses() -> None:
    text = POLICY_FILE.read_text()
    for value in (MANAGED_BY_LABEL, MANAGER, TRUST_BUNDLE_CONFIGMAP):
        assert f"'{value}'" in text
    objects = installed()
    reconciler_pod = only(objects, "Deployment", "tls-injector-reconciler")["spec"]["template"]["spec"]
    assert f"system:serviceaccount:tls-injector:{reconciler_pod['serviceAccountName']}" == RECONCILER
    job = only(objects, "Job", "tls-injector-bootstrap")
    job_account = job["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"system:serviceaccount:{job['metadata']['namespace']}:{job_account}" == BOOTSTRAP
    role = only(objects, "Role", "tls-injector-bootstrap")
    pinned = {name for rule in role["rules"] for name in rule.get("resourceNames", [])}
    assert pinned == {"tls-injector-webhook-ca", "tls-injector-webhook-tls"}
    assert all(f"'{name}'" in text for name in pinned)


@pytest.mark.parametrize("directory", ["manifests/base", "manifests/overlays/example"])
def test_every_rendering_binds_both_policies_to_deny(directory: str) -> None:
    objects = render(ROOT / directory)
    names = {p["metadata"]["name"] for p in POLICIES}
    assert names == {"tls-injector.reserved-objects", "tls-injector.reconciler-reach"}
    bindings = {b["spec"]["policyName"]: b for b in of_kind(objects, "ValidatingAdmissionPolicyBinding")}
    policies = {p["metadata"]["name"] for p in of_kind(objects, "ValidatingAdmissionPolicy")}
    for name in names:
        assert name in policies
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in bindings[name]["spec"], "bound in every namespace"


Snapshot = dict[tuple[str, str, str], Obj]


def stored(emu: Emulator) -> Snapshot:
    return {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o
            for resource in ("secrets", "configmaps") for o in emu.objects(resource)}


def writes_between(before: Snapshot, after: Snapshot) -> list[Obj]:
    """The reconciler's writes of one pass as the admission requests the apiserver would have judged."""
    found = [request("CREATE", RECONCILER, new=after[k]) for k in after.keys() - before.keys()]
    found += [request("DELETE", RECONCILER, old=before[k]) for k in before.keys() - after.keys()]
    found += [request("UPDATE", RECONCILER, new=after[k], old=before[k]) for k in after.keys() & before.keys()
              if after[k]["metadata"].get("resourceVersion") != before[k]["metadata"].get("resourceVersion")]
    return found


def test_every_write_of_the_real_reconciler_through_issue_rotation_and_clean_up_passes_the_policies(
        kubeapi: Emulator) -> None:
    """The reconciler against the emulator: certificates and bundles issued, a squatted bundle and a
    tenant's Secret left alone, a CA replaced step by step, a workload removed; the objects before and
    after each pass are the admission requests of its writes, each judged as the reconciler's account."""
    small_cluster(kubeapi, namespaces=2, per_namespace=2)
    namespace(kubeapi, "squat")
    deployment(kubeapi, "web", "squat")
    kubeapi.add(thing("ConfigMap", TRUST_BUNDLE_CONFIGMAP, "squat"))
    kubeapi.add(thing("Secret", "db-password", "ns0", {"app": "db"}))
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    judged: list[Obj] = []

    def one_pass() -> None:
        before = stored(kubeapi)
        rec.run_pass()
        judged.extend(writes_between(before, stored(kubeapi)))

    one_pass()
    force_replace(kubeapi)
    for _ in range(8):  # past each 5-minute settle until the old CA is gone
        clock.advance(timedelta(minutes=6))
        one_pass()
    KubeApi(kubeapi.api_client()).delete(DEPLOYMENTS, "app1", namespace="ns1")
    clock.advance(timedelta(minutes=6))
    one_pass()
    refused = {f"{r['operation']} {r['resource']['resource']} {r['namespace']}/{r['name']}": refusals(r)
               for r in judged if refusals(r)}
    assert refused == {}
    kinds = {(r["operation"], r["resource"]["resource"]) for r in judged}
    assert {("CREATE", "secrets"), ("CREATE", "configmaps"), ("UPDATE", "secrets"), ("UPDATE", "configmaps"),
            ("DELETE", "secrets")} <= kinds, kinds
    assert kubeapi.get("configmaps", TRUST_BUNDLE_CONFIGMAP, "squat")["metadata"].get("labels") is None
