"""`tls-injector.webhook-configurations` (manifests/base/cluster-objects-policy.yaml and the chart's
copy): every account of the injector's namespace may change only `caBundle` of the two configurations
named tls-injector. Its CEL evaluated as the apiserver evaluates it (tests/shipping/test_reconciler_policy.py
holds the machinery), on the shipped configurations themselves: the attacks a stolen reconciler or
bootstrap token would make refused, a caBundle update allowed, and every write of the real reconciler
(issue, then a webhook CA rotation through every state) passing. tests/cluster/test_webhook_configurations.py
sends the same attacks to a real kube-apiserver.
"""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, reconciler, small_cluster
from tests.shipping.support import ROOT, Obj, installed, load_docs, of_kind, only, render, render_with_components
from tests.shipping.test_reconciler_policy import refusals
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

POLICY_FILE = ROOT / "manifests" / "base" / "cluster-objects-policy.yaml"
POLICY_NAME = "tls-injector.webhook-configurations"
POLICIES = [d for d in load_docs(POLICY_FILE) if d["kind"] == "ValidatingAdmissionPolicy"]
GROUP = "admissionregistration.k8s.io"

OURS = {name: f"system:serviceaccount:tls-injector:{name}" for name in (
    "tls-injector-reconciler", "tls-injector-bootstrap", "tls-injector-hub", "tls-injector")}
ADMIN = "kubernetes-admin"
OLD_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nold\n-----END CERTIFICATE-----\n").decode()
NEW_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnew\n-----END CERTIFICATE-----\n").decode()


def configuration(kind: str) -> Obj:
    """The shipped configuration of `kind` as stored after the bootstrap: caBundle in every entry, the
    fields the apiserver adds (resourceVersion, generation, managedFields, uid)."""
    stored = copy.deepcopy(only(installed(), kind, "tls-injector"))
    stored["metadata"].update({"uid": str(uuid.uuid4()), "resourceVersion": "100", "generation": 2,
                               "managedFields": [{"manager": "kubectl", "operation": "Apply"}]})
    for entry in stored["webhooks"]:
        entry["clientConfig"]["caBundle"] = OLD_CA
    return stored


def review(operation: str, user: str, *, new: Obj | None = None, old: Obj | None = None) -> Obj:
    subject = new or old
    assert subject is not None
    kind = subject["kind"]
    return {"uid": str(uuid.uuid4()), "kind": {"group": GROUP, "version": "v1", "kind": kind},
            "resource": {"group": GROUP, "version": "v1", "resource": kind.lower() + "s"},
            "name": subject["metadata"]["name"], "namespace": "", "operation": operation,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": new, "oldObject": old, "dryRun": False}


def edited(kind: str, change: Callable[[Obj], None], *, moved: bool = True) -> tuple[Obj, Obj]:
    """(new, old): the stored configuration and the same changed by `change`, as the apiserver hands
    them to admission (resourceVersion, generation and managedFields moved, unless `moved` is False)."""
    old = configuration(kind)
    new = copy.deepcopy(old)
    change(new)
    if moved:
        new["metadata"].update({"resourceVersion": "101", "generation": 3,
                                "managedFields": [{"manager": "tls-injector", "operation": "Update"}]})
    return new, old


def every_ca_bundle(obj: Obj) -> None:
    for entry in obj["webhooks"]:
        entry["clientConfig"]["caBundle"] = NEW_CA


def first(change: Callable[[Obj], None]) -> Callable[[Obj], None]:
    return lambda obj: change(obj["webhooks"][0])


def point_at_a_url(entry: Obj) -> None:
    entry["clientConfig"] = {"url": "https://attacker.example/mutate", "caBundle": NEW_CA}


def widen_to_every_write(entry: Obj) -> None:
    entry["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "scope": "*",
                       "operations": ["CREATE", "UPDATE", "DELETE"]}]
    entry["failurePolicy"] = "Fail"
    entry["namespaceSelector"] = {}
    entry.pop("objectSelector", None)
    entry.pop("matchConditions", None)
    entry["clientConfig"] = {"url": "https://192.0.2.1:1/never", "caBundle": OLD_CA}


def set_key(key: str, value: object) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        obj[key] = value
    return change


def drop_key(key: str) -> Callable[[Obj], None]:
    return lambda obj: obj.pop(key)


def flip_failure_policy(entry: Obj) -> None:
    entry["failurePolicy"] = "Ignore" if entry.get("failurePolicy", "Fail") == "Fail" else "Fail"


def add_entry(obj: Obj) -> None:
    extra = copy.deepcopy(obj["webhooks"][0])
    extra["name"] = "extra.tls-injector.io"
    obj["webhooks"].append(extra)


def rename_first(obj: Obj) -> None:
    obj["webhooks"][0]["name"] = "renamed.tls-injector.io"


def swap_first_two(obj: Obj) -> None:
    obj["webhooks"][0], obj["webhooks"][1] = obj["webhooks"][1], obj["webhooks"][0]


def drop_last(obj: Obj) -> None:
    obj["webhooks"].pop()


def label(obj: Obj) -> None:
    obj["metadata"].setdefault("labels", {})["team"] = "x"


def annotate(obj: Obj) -> None:
    obj["metadata"].setdefault("annotations", {})["cert-manager.io/inject-ca-from"] = "attacker/ca"


def finalize(obj: Obj) -> None:
    obj["metadata"]["finalizers"] = ["example.com/hold"]


def set_service(field: str, value: object) -> Callable[[Obj], None]:
    def change(entry: Obj) -> None:
        entry["clientConfig"]["service"][field] = value
    return change


MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
ATTACKS: list[tuple[str, str, Callable[[Obj], None]]] = [
    ("point the mutating entry at a URL", MUTATING, first(point_at_a_url)),
    ("drop the mutating entry's namespace selector", MUTATING, first(drop_key("namespaceSelector"))),
    ("drop the mutating entry's object selector", MUTATING, first(drop_key("objectSelector"))),
    ("set the mutating entry's failurePolicy Ignore", MUTATING, first(set_key("failurePolicy", "Ignore"))),
    ("never reinvoke the mutating entry", MUTATING, first(set_key("reinvocationPolicy", "Never"))),
    ("point the mutating entry at another Service", MUTATING, first(set_service("name", "attacker"))),
    ("point the mutating entry at another namespace", MUTATING, first(set_service("namespace", "team-a"))),
    ("point the mutating entry at another path", MUTATING, first(set_service("path", "/validate"))),
    ("point the mutating entry at another port", MUTATING, first(set_service("port", 8443))),
    ("match by exact version only", MUTATING, first(set_key("matchPolicy", "Exact"))),
    ("set a field no Kubernetes of today has (a later one's)", MUTATING, first(set_key("futureField", {"on": True}))),
    ("a timeout of 30 s", MUTATING, first(set_key("timeoutSeconds", 30))),
    ("add a mutating entry", MUTATING, add_entry),
    ("remove a mutating entry", MUTATING, drop_last),
    ("rename a mutating entry", MUTATING, rename_first),
    ("reorder the mutating entries", MUTATING, swap_first_two),
    ("widen the validating entry to every write, Fail, dead address", VALIDATING, first(widen_to_every_write)),
    ("flip the validating entry's failurePolicy", VALIDATING, first(flip_failure_policy)),
    ("flip the last validating entry's failurePolicy", VALIDATING,
     lambda obj: flip_failure_policy(obj["webhooks"][-1])),
    ("drop the validating entry's match conditions", VALIDATING, first(drop_key("matchConditions"))),
    ("drop the validating entry's rules", VALIDATING, first(set_key("rules", []))),
    ("remove every validating entry", VALIDATING, set_key("webhooks", [])),
    ("label the configuration", VALIDATING, label),
    ("annotate the configuration for another CA injector", MUTATING, annotate),
    ("add a finalizer", MUTATING, finalize),
]


def _refused_cases() -> list[tuple[str, Obj]]:
    cases = []
    for account, user in OURS.items():
        for what, kind, change in ATTACKS:
            def with_ca(obj: Obj, change: Callable[[Obj], None] = change) -> None:
                every_ca_bundle(obj)  # an attack rides along with a legitimate caBundle change
                change(obj)
            new, old = edited(kind, with_ca)
            cases.append((f"{account}: {what}", review("UPDATE", user, new=new, old=old)))
        other = configuration(VALIDATING)
        other["metadata"]["name"] = "someone-else"
        new = copy.deepcopy(other)
        every_ca_bundle(new)
        cases += [
            (f"{account}: create a configuration", review("CREATE", user, new=other)),
            (f"{account}: delete ours", review("DELETE", user, old=configuration(MUTATING))),
            (f"{account}: delete another", review("DELETE", user, old=other)),
            (f"{account}: caBundle of another configuration", review("UPDATE", user, new=new, old=other)),
        ]
    return cases


def _allowed_cases() -> list[tuple[str, Obj]]:
    cases = []
    for kind in (MUTATING, VALIDATING):
        for account, user in OURS.items():
            new, old = edited(kind, every_ca_bundle)
            cases.append((f"{account}: caBundle of every {kind} entry", review("UPDATE", user, new=new, old=old)))
            new, old = edited(kind, first(lambda e: e["clientConfig"].update(caBundle=NEW_CA)), moved=False)
            cases.append((f"{account}: caBundle of one {kind} entry", review("UPDATE", user, new=new, old=old)))
            new, old = edited(kind, lambda obj: None)
            cases.append((f"{account}: an update that changes nothing", review("UPDATE", user, new=new, old=old)))
        new, old = edited(kind, first(point_at_a_url))
        cases.append((f"a cluster admin reconfigures the {kind}", review("UPDATE", ADMIN, new=new, old=old)))
        new, old = edited(kind, add_entry)
        cases.append((f"another namespace's account adds an entry to the {kind}",
                      review("UPDATE", "system:serviceaccount:argocd:argocd-application-controller", new=new,
                             old=old)))
    return cases


REFUSED = _refused_cases()
ALLOWED = _allowed_cases()


def _rendered_policies(rendering: str) -> list[Obj]:
    if rendering == "kustomize base":
        objects = render(ROOT / "manifests/base")
    elif rendering == "kustomize member":
        objects = render_with_components("manifests/base", "manifests/components/member")
    else:
        from tests.shipping.test_chart import template, values
        role = rendering.removeprefix("chart ")
        objects = template(*(values(federation={"role": role}) if role != "standalone" else []))
    return [p for p in of_kind(objects, "ValidatingAdmissionPolicy")]


RENDERINGS = ("kustomize base", "kustomize member", "chart standalone", "chart member")


@pytest.mark.parametrize(("case", "request_"), REFUSED, ids=[c for c, _ in REFUSED])
def test_the_policy_refuses(case: str, request_: Obj) -> None:
    found = refusals(request_, POLICIES)
    assert found, f"{case}: allowed"
    assert all(request_["userInfo"]["username"] in text for text in found), found


@pytest.mark.parametrize(("case", "request_"), ALLOWED, ids=[c for c, _ in ALLOWED])
def test_the_policy_allows(case: str, request_: Obj) -> None:
    assert refusals(request_, POLICIES) == [], case


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_every_rendering_ships_the_policy_bound_to_deny_and_judging_alike(rendering: str) -> None:
    """The chart's copy and the member's install carry the same policy: the worst attack of each kind is
    refused and a caBundle update allowed with the policies each rendering ships."""
    policies = _rendered_policies(rendering)
    ours = [p for p in policies if p["metadata"]["name"] == POLICY_NAME]
    assert len(ours) == 1, rendering
    widened = next(r for c, r in REFUSED if "widen the validating entry" in c)
    for hostile in (REFUSED[0][1], widened):
        assert refusals(hostile, ours), rendering
    assert refusals(ALLOWED[0][1], policies) == []


@pytest.mark.parametrize("directory", ["manifests/base", "manifests/overlays/example"])
def test_every_rendering_binds_the_policy_to_deny_everywhere(directory: str) -> None:
    objects = render(ROOT / directory)
    binding = only(objects, "ValidatingAdmissionPolicyBinding", POLICY_NAME)
    assert binding["spec"] == {"policyName": POLICY_NAME, "validationActions": ["Deny"]}


def test_the_policy_judges_every_account_bound_to_a_write_of_the_configurations() -> None:
    """Whoever the shipped RBAC lets update a webhook configuration is an account of tls-injector: the
    policy's prefix covers them all (tests/shipping/test_write_fences.py enumerates every write)."""
    prefix = "system:serviceaccount:tls-injector:"
    assert f"'{prefix}'" in POLICY_FILE.read_text()
    objects = render_with_components("manifests/base", "manifests/components/member") + render(
        ROOT / "certs-bootstrap")
    writers = set()
    roles = {o["metadata"]["name"] for o in of_kind(objects, "ClusterRole")
             if any(r["resources"] and {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
                    & set(r["resources"]) for r in o.get("rules") or [])}
    for binding in of_kind(objects, "ClusterRoleBinding"):
        if binding["roleRef"]["name"] in roles:
            writers |= {f"system:serviceaccount:{s['namespace']}:{s['name']}" for s in binding["subjects"]}
    assert writers == {OURS["tls-injector-reconciler"], OURS["tls-injector-bootstrap"]}
    assert all(w.startswith(prefix) for w in writers)


def test_every_write_of_the_real_reconciler_to_the_configurations_passes_through_a_ca_rotation(
        kubeapi: Emulator) -> None:
    """The reconciler keeping caBundle against the emulator: the first pass, then a forced replacement of
    the webhook's CA through every state; each configuration before and after each pass is the admission
    request of its write, judged as the reconciler's account."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    for kind in (MUTATING, VALIDATING):
        shipped = copy.deepcopy(only(installed(), kind, "tls-injector"))
        kubeapi.add(shipped)
    clock = Clock()
    rec = reconciler(kubeapi, clock, webhook=WebhookSettings())
    judged: list[Obj] = []

    def stored() -> dict[str, Obj]:
        return {o["kind"]: o for r in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
                for o in kubeapi.objects(r)}

    def one_pass() -> None:
        before = stored()
        rec.run_pass()
        after = stored()
        judged.extend(review("UPDATE", OURS["tls-injector-reconciler"], new=after[k], old=before[k]) for k in after
                      if after[k]["metadata"].get("resourceVersion") != before[k]["metadata"].get("resourceVersion"))

    one_pass()
    first_bundles = {w["clientConfig"]["caBundle"] for o in stored().values() for w in o["webhooks"]}
    api = KubeApi(kubeapi.api_client())
    ca = api.get(SECRETS, "tls-injector-webhook-ca", namespace=OWN_NS)
    ca["metadata"]["annotations"] = {"tls-injector.io/force-replace": "yes"}
    api.replace(SECRETS, ca)
    for _ in range(12):
        clock.advance(timedelta(hours=2))
        one_pass()
    bundles = {w["clientConfig"]["caBundle"] for o in stored().values() for w in o["webhooks"]}
    assert len(judged) >= 4, "the first caBundle and the rotation's steps, in both configurations"
    assert {r["kind"]["kind"] for r in judged} == {MUTATING, VALIDATING}
    assert len(bundles) == 1
    assert bundles != first_bundles, "the webhook's CA was replaced"
    print(f"{len(judged)} writes of the configurations judged")
    refused = {f"{r['kind']['kind']} #{i}": refusals(r, POLICIES) for i, r in enumerate(judged)
               if refusals(r, POLICIES)}
    assert refused == {}
