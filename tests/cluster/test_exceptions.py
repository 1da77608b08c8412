"""The sanctioned exception to the TLS transition rules on the real apiserver (docs/rules.md,
"Exceptions"): RBAC decides who may take it, through the exported policies' `authorizer`; the pod
template's annotation tls-injector.io/tls-change names the one change it allows.

Two users act through the admin kubeconfig's impersonation (`--as`), each allowed by a Role to update
the namespace's Deployments; only `granted` also holds the verb change-tls on tlsexceptions.tls-injector.io
for the workload `api`. Judged in three installs, which must agree where they overlap:
- webhook (--tls-exceptions policy) and policies: the ordinary user refused, the granted one let through
  once, a second change under the same annotation refused, the grant not reaching another workload;
- the policies alone (the webhook stopped): the same verdicts;
- the webhook alone, exceptions off (its default): everyone refused, told how to ask.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import Installation, wait_until
from tests.cluster.test_mission import apply, deployment, make_namespace
from tests.cluster.test_policies import exported_policies, set_failure_policy

POLICY = "tls-injector.workload-tls-transition"
ORDINARY, GRANTED = "exception-ordinary", "exception-granted"
TAKEN = "let through as the exception the object names"


def grant(cluster: ControlPlane, namespace: str) -> None:
    """Both users may update Deployments; only GRANTED may take the exception, for `api` alone."""
    cluster.kubectl("create", "role", "edit-deployments", "-n", namespace, "--verb=get,list,create,update,patch",
                    "--resource=deployments.apps")
    cluster.kubectl("create", "rolebinding", "edit-deployments", "-n", namespace, "--role=edit-deployments",
                    f"--user={ORDINARY}", f"--user={GRANTED}")
    # As docs/rules.md writes it (`kubectl create role` refuses a resource discovery does not list).
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "change-tls-api", "namespace": namespace},
            "rules": [{"apiGroups": ["tls-injector.io"], "resources": ["tlsexceptions"], "resourceNames": ["api"],
                       "verbs": ["change-tls"]}]}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(role))
    cluster.kubectl("create", "rolebinding", "change-tls-api", "-n", namespace, "--role=change-tls-api",
                    f"--user={GRANTED}")

    # As docs/rules.md asks it: `kubectl auth can-i` maps a resource discovery does not list to the core group.
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"group": "tls-injector.io", "resource": "tlsexceptions",
                                              "verb": "change-tls", "namespace": namespace, "name": "api"}}}

    def can(user: str) -> str:
        done = cluster.kubectl("create", "--validate=false", "-o", "jsonpath={.status.allowed}", "-f", "-",
                               f"--as={user}", stdin=json.dumps(review))
        return str(done.stdout.strip())
    wait_until("the grant to reach the authorizer", lambda: can(GRANTED) == "true", timeout=30)
    assert can(ORDINARY) == "false"


def changed(manifest: dict[str, Any], *, tls: bool = True, secret: str | None, change: str | None) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    template = out["spec"]["template"]["metadata"]
    if not tls:
        template["labels"].pop("tls-injector.io/inject", None)
    annotations = template["annotations"]
    annotations.pop("tls-injector.io/secret-name", None)
    if secret is not None:
        annotations["tls-injector.io/secret-name"] = secret
    if change is not None:
        annotations["tls-injector.io/tls-change"] = change
    return out


def as_user(cluster: ControlPlane, user: str, manifest: dict[str, Any], *extra: str) -> Any:
    return apply(cluster, manifest, f"--as={user}", *extra)


def one_line(text: str) -> str:
    return " ".join(text.split())


def setup(cluster: ControlPlane, installed: Installation, namespace: str) -> dict[str, Any]:
    make_namespace(cluster, installed.core, namespace)
    grant(cluster, namespace)
    api = deployment("api", namespace, secret="api-tls")
    assert apply(cluster, api).returncode == 0
    assert apply(cluster, deployment("web", namespace, secret="web-tls")).returncode == 0
    return api


def wait_for_policy(cluster: ControlPlane, manifest: dict[str, Any]) -> None:
    """Until the apiserver enforces the freshly applied policies (they compile in the background)."""
    def refused() -> bool:
        answer = as_user(cluster, ORDINARY, manifest, "--dry-run=server")
        return answer.returncode != 0 and POLICY in answer.stderr
    wait_until("the policies to be enforced", refused, timeout=60)


def policy_verdicts(cluster: ControlPlane, api: dict[str, Any], namespace: str) -> None:
    """Where the policies judge: the ordinary user refused by the policy, the granted one let through
    once, the grant not reaching another workload."""
    off = changed(api, tls=False, secret="api-tls", change="api-tls->(off)")
    wait_for_policy(cluster, off)
    refused = as_user(cluster, ORDINARY, off)
    assert refused.returncode != 0
    assert POLICY in refused.stderr
    assert "tls-injector.io/tls-change" in one_line(refused.stderr)
    without = as_user(cluster, GRANTED, changed(api, tls=False, secret="api-tls", change=None), "--dry-run=server")
    assert without.returncode != 0, "the grant alone, without the annotation naming the change, allows nothing"
    swap = changed(api, secret="api-v2-tls", change="api-tls->api-v2-tls")
    taken = as_user(cluster, GRANTED, swap)
    assert taken.returncode == 0, taken.stderr
    again = as_user(cluster, GRANTED, changed(api, tls=False, secret="api-v2-tls", change="api-tls->api-v2-tls"))
    assert again.returncode != 0, "the annotation allowed a second change"
    assert POLICY in again.stderr
    web = deployment("web", namespace, secret="web-tls")
    elsewhere = as_user(cluster, GRANTED, changed(web, tls=False, secret="web-tls", change="web-tls->(off)"))
    assert elsewhere.returncode != 0, "the grant for api reached web"
    assert POLICY in elsewhere.stderr
    current = kubernetes_template(cluster, namespace, "api")
    assert current["annotations"]["tls-injector.io/secret-name"] == "api-v2-tls"


def kubernetes_template(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    done = cluster.kubectl("get", "deployment", name, "-n", namespace, "-o", "json")
    template: dict[str, Any] = json.loads(done.stdout)["spec"]["template"]["metadata"]
    return template


@pytest.fixture
def policies(cluster: ControlPlane) -> Iterator[None]:
    documents = exported_policies()
    cluster.kubectl("apply", "-f", "-", stdin=documents)
    try:
        yield
    finally:
        cluster.kubectl("delete", "-f", "-", stdin=documents)


def test_with_the_webhook_and_the_policies_only_a_granted_subject_takes_the_exception_once(
    cluster: ControlPlane, installed: Installation, policies: None,
) -> None:
    installed.stop("webhook")
    installed.start_webhook("--tls-exceptions=policy")
    try:
        api = setup(cluster, installed, "exceptions-both")
        policy_verdicts(cluster, api, "exceptions-both")
        # The webhook lets it through and says why: its warning reaches kubectl.
        taken = as_user(cluster, GRANTED, changed(api, tls=False, secret="api-v2-tls", change="api-v2-tls->(off)"))
        assert taken.returncode == 0, taken.stderr
        assert TAKEN in one_line(taken.stderr)
        assert "TLS exception: update of Deployment exceptions-both/api" in installed.log("webhook")
        # The reconciler, under its shipped RBAC, tells it on the workload.
        core = installed.core

        def told() -> list[Any]:
            events = core.list_namespaced_event("exceptions-both").items
            return [e for e in events if e.reason == "TLSChangeException" and e.involved_object.name == "api"
                    and "api-v2-tls->(off)" in e.message]  # the swap before it may have been told too
        [event] = wait_until("the reconciler's Event on the workload", told, timeout=120)
        assert event.type == "Normal"
    finally:
        installed.stop("webhook")
        installed.start_webhook()


def test_the_policies_alone_give_the_same_verdicts(
    cluster: ControlPlane, installed: Installation, admin: kubernetes.client.ApiClient, policies: None,
) -> None:
    admission = kubernetes.client.AdmissionregistrationV1Api(admin)
    before = [w.failure_policy for w in admission.read_validating_webhook_configuration("tls-injector").webhooks]
    installed.stop("webhook")
    set_failure_policy(admission, ["Ignore"] * len(before))
    try:
        api = setup(cluster, installed, "exceptions-policies")
        policy_verdicts(cluster, api, "exceptions-policies")
    finally:
        set_failure_policy(admission, before)
        installed.start_webhook()


def test_the_webhook_alone_grants_no_exception_and_says_how_to_ask(
    cluster: ControlPlane, installed: Installation,
) -> None:
    api = setup(cluster, installed, "exceptions-webhook")
    bare = as_user(cluster, GRANTED, changed(api, tls=False, secret="api-tls", change=None), "--dry-run=server")
    assert bare.returncode != 0
    assert "tls-injector.io/tls-change" in one_line(bare.stderr)
    assert "change-tls" in one_line(bare.stderr)
    for user in (ORDINARY, GRANTED):
        named = as_user(cluster, user, changed(api, tls=False, secret="api-tls", change="api-tls->(off)"))
        assert named.returncode != 0
        assert "names itself as an exception, but this webhook grants none" in one_line(named.stderr)
    assert kubernetes_template(cluster, "exceptions-webhook", "api")["labels"]["tls-injector.io/inject"] == "true"
