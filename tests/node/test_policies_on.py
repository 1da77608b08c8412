"""Dry-run and apply-time refusals on running pods with the admission-policy component on: the webhook
pods behind their Service (the node's install, tests/node/install.py) and the exported
ValidatingAdmissionPolicies, both in force; test_mission.py has the same refusals with the webhook alone.

The component (manifests/components/admission-policy) is applied to the session's install as an overlay
would apply it: its resource (policies.yaml) server-side, and its one patch (the JSON patch its
kustomization.yaml holds, adding `--tls-exceptions=policy` to the webhook Deployment's args) with
`kubectl patch`, then the webhook's rollout waited for until no pod without the flag is left. The args
list is atomic in server-side apply, so a JSON patch adds the one flag and keeps what other tests added
(test_modes.py's `--pod-certificates=on`). At the end the flag is removed again (by its index, guarded by
a `test` op), the rollout waited for, the policies deleted, and the test waits until the webhook alone
answers again (refusing a named exception: "this webhook grants none"): the install is left as found,
for the tests that run after these on the same node.

Who answers: kube-apiserver runs its ValidatingAdmissionPolicy plugin before its ValidatingAdmissionWebhook
plugin and stops at the first refusal, so where both refuse, the refusal kubectl shows is the policy's
(it names the policy). The webhook pods are shown in force by what only they say: the mutating webhook's
warning on a dry-run create, and the validating webhook's warning when it lets an exception through.

The case only the policies decide is the RBAC-gated exception (docs/rules.md, "Exceptions"), as
tests/cluster/test_exceptions.py does it on the cluster tier (its `grant`, users by impersonation):
an ordinary user is refused, a user granted `change-tls` on `tlsexceptions.tls-injector.io` for that
workload is let through once, and the workload's pods roll to the Secret the change names.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.install import wait_until
from tests.cluster.test_exceptions import GRANTED, ORDINARY, POLICY, TAKEN, changed, grant, one_line
from tests.node import pods
from tests.node.harness import Node
from tests.node.install import IMAGE_BUILD_SECONDS, ROOT, Installed
from tests.node.install import NS as INJECTOR_NS
from tests.node.pods import NON_ROOT

# When this file runs alone, its first test pays for the node, the image (cached) and the install.
pytestmark = pytest.mark.timeout(IMAGE_BUILD_SECONDS + 600)
NS = "node-policies"
COMPONENT = ROOT / "manifests" / "components" / "admission-policy"
FLAG = "--tls-exceptions=policy"
DEPLOYMENT = f"/apis/apps/v1/namespaces/{INJECTOR_NS}/deployments/tls-injector"
WEBHOOK_PODS = (f"/api/v1/namespaces/{INJECTOR_NS}/pods?labelSelector=app.kubernetes.io%2Fname%3Dtls-injector,"
                "app.kubernetes.io%2Fcomponent%3Dwebhook")
DISABLE_MESSAGE = "can be enabled in place, but not turned off or pointed at another Secret"
GRANTS_NONE = "names itself as an exception, but this webhook grants none"
# The webhook's rollout (two replicas, each old one draining 20 s) and a new policy's compilation: a
# minute or two on 2 loaded cores.
SETTLE_SECONDS = 300.0


def component() -> tuple[str, list[dict[str, Any]]]:
    """The component's policies (its one resource) and its patch of the webhook Deployment (JSON patch ops)."""
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    (resource,) = kustomization["resources"]
    (patch,) = kustomization["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "tls-injector"}
    ops: list[dict[str, Any]] = yaml.safe_load(patch["patch"])
    # The teardown removes exactly this flag: the component must add nothing else.
    assert [(op["op"], op["value"]) for op in ops] == [("add", FLAG)], ops
    return (COMPONENT / resource).read_text(), ops


def webhook_args(node: Node) -> list[str]:
    return list(node.get_json(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["args"])


def webhook_pods(node: Node) -> list[dict[str, Any]]:
    return list(node.get_json(WEBHOOK_PODS)["items"])


def wait_webhook_rolled(node: Node, installed: Installed, *, flagged: bool) -> None:
    """Every webhook replica of the current template available, and every pod left with (or without) the
    flag: an old pod still draining answers the apiserver on the connections it keeps open to it."""
    installed.wait_available("tls-injector")

    def settled() -> bool:
        found = webhook_pods(node)
        return bool(found) and all((FLAG in pod["spec"]["containers"][0]["args"]) == flagged
                                   and not pod["metadata"].get("deletionTimestamp") for pod in found)
    wait_until(f"the webhook's pods all {'with' if flagged else 'without'} {FLAG}", settled, timeout=SETTLE_SECONDS,
               interval=1.0)


def admission_policies(node: Node) -> set[str]:
    """The cluster's ValidatingAdmissionPolicies and bindings (the base install has two of its own)."""
    return {f"{kind}/{item['metadata']['name']}" for kind in ("validatingadmissionpolicies",
                                                              "validatingadmissionpolicybindings")
            for item in node.get_json(f"/apis/admissionregistration.k8s.io/v1/{kind}")["items"]}


def apply_as(node: Node, manifest: dict[str, Any], *extra: str) -> Any:
    return node.kubectl("apply", *extra, "-f", "-", stdin=json.dumps(manifest), check=False)


def workload(node: Node, name: str, *, secret: str, replicas: int = 0) -> dict[str, Any]:
    """A labelled Deployment naming its Secret; no replicas unless asked (admission needs none)."""
    manifest = pods.deployment(node, NS, name, "sleep 3600", pod_security=NON_ROOT,
                               annotations={"tls-injector.io/secret-name": secret})
    manifest["spec"]["replicas"] = replicas
    return manifest


def template(node: Node, name: str) -> dict[str, Any]:
    found = node.get_json(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
    return {"generation": found["metadata"]["generation"], "metadata": found["spec"]["template"]["metadata"]}


@pytest.fixture(scope="module")
def policies_on(node: Node, installed: Installed) -> Iterator[str]:
    """The admission-policy component applied on the session's install; removed again afterwards."""
    policies, ops = component()
    args_before, policies_before = webhook_args(node), admission_policies(node)
    assert FLAG not in args_before, "the install already runs the webhook with the component's flag"
    plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
              "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
    component_policies = {f"{plural[d['kind']]}/{d['metadata']['name']}" for d in yaml.safe_load_all(policies) if d}
    assert not component_policies & policies_before, "the component's policies are already installed"
    namespace = pods.make_namespace(node, NS)
    grant(node.cp, namespace)
    probe = workload(node, "probe", secret="probe-tls")
    assert apply_as(node, probe).returncode == 0
    probe_off = changed(probe, tls=False, secret="probe-tls", change=None)
    try:
        node.kubectl("apply", "--server-side", "--field-manager=tls-injector-install", "-f", "-", stdin=policies)
        node.kubectl("patch", "deployment", "tls-injector", "-n", INJECTOR_NS, "--type=json", "-p", json.dumps(ops))
        wait_webhook_rolled(node, installed, flagged=True)

        def enforced() -> bool:  # a new policy is compiled and picked up in the background
            answer = apply_as(node, probe_off, "--dry-run=server")
            return answer.returncode != 0 and POLICY in answer.stderr
        wait_until("the policies to be enforced", enforced, timeout=SETTLE_SECONDS, interval=1.0)
        assert component_policies <= admission_policies(node)
        yield namespace
    finally:
        args = webhook_args(node)
        if FLAG in args:
            at = f"/spec/template/spec/containers/0/args/{args.index(FLAG)}"
            node.kubectl("patch", "deployment", "tls-injector", "-n", INJECTOR_NS, "--type=json", "-p", json.dumps(
                [{"op": "test", "path": at, "value": FLAG}, {"op": "remove", "path": at}]))
        node.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=policies)
        wait_webhook_rolled(node, installed, flagged=False)
        named = changed(probe, tls=False, secret="probe-tls", change="probe-tls->(off)")

        def webhook_alone() -> bool:  # no policy refuses the ordinary user, and the webhook grants none again
            answer = apply_as(node, named, f"--as={ORDINARY}", "--dry-run=server")
            return answer.returncode != 0 and POLICY not in answer.stderr and GRANTS_NONE in one_line(answer.stderr)
        wait_until("the webhook alone to answer again", webhook_alone, timeout=SETTLE_SECONDS, interval=1.0)
        # The workloads here name a TLS exception (doctor would list them): gone with their namespace.
        node.kubectl("delete", "namespace", NS, "--timeout=120s", timeout=150)
        assert webhook_args(node) == args_before
        assert admission_policies(node) == policies_before


def test_the_webhook_pods_run_with_the_components_flag_and_answer(node: Node, policies_on: str) -> None:
    found = webhook_pods(node)
    assert len(found) == node.get_json(DEPLOYMENT)["spec"]["replicas"] == 2, [p["metadata"]["name"] for p in found]
    for pod in found:
        assert FLAG in pod["spec"]["containers"][0]["args"]
        log = node.container_log(INJECTOR_NS, pod["metadata"]["name"], "tls-injector")
        assert "TLS exceptions for /validate: policy" in log, log[-2000:]
    # The mutating webhook pods answer a dry-run create: their warning names the Secret it would get.
    created = apply_as(node, workload(node, "preview", secret="preview-tls"), "--dry-run=server")
    assert created.returncode == 0, created.stderr
    assert "Warning:" in created.stderr, created.stderr
    assert "preview-tls" in one_line(created.stderr), created.stderr
    missing = node.kubectl("get", "deployment", "preview", "-n", NS, check=False)
    assert "NotFound" in missing.stderr, missing.stdout  # a dry run: nothing made


@pytest.mark.parametrize("change", ["disable", "swap"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "apply"])
def test_turning_tls_off_or_swapping_the_secret_is_refused_and_says_why(
        node: Node, policies_on: str, change: str, dry_run: bool) -> None:
    name = f"guard-{change}-{'dry' if dry_run else 'real'}"
    before = workload(node, name, secret=f"{name}-tls")
    assert apply_as(node, before).returncode == 0
    stored = template(node, name)
    after = copy.deepcopy(before)
    metadata = after["spec"]["template"]["metadata"]
    if change == "disable":
        del metadata["labels"]["tls-injector.io/inject"]
    else:
        metadata["annotations"]["tls-injector.io/secret-name"] = "other-tls"
    refused = apply_as(node, after, *(["--dry-run=server"] if dry_run else []))
    assert refused.returncode != 0, refused.stdout
    said = one_line(refused.stderr)
    # The policy answers first (the apiserver runs policies before webhooks): it says the rule, why, and
    # how to ask for the exception.
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in said, said
    assert DISABLE_MESSAGE in said, said
    assert "because every client would break at once" in said, said
    assert "tls-injector.io/tls-change" in said, said
    assert "change-tls" in said, said
    assert template(node, name) == stored, "a refused change changed the Deployment"


def wait_for_rolled_pod(node: Node, name: str, secret: str) -> dict[str, Any]:
    """The workload's one pod mounting `secret` as its certificate, Ready, and no other pod left."""
    def rolled() -> dict[str, Any] | None:
        found = pods.pods_of(node, NS, name)
        current = [p for p in found if not p["metadata"].get("deletionTimestamp")]
        if len(found) != 1 or len(current) != 1:
            return None
        volume = next((v for v in current[0]["spec"]["volumes"] if v["name"] == "tls-injector-cert"), None)
        if volume is None or volume.get("secret", {}).get("secretName") != secret:
            return None
        ready = [c for c in current[0].get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        return current[0] if ready and ready[0]["status"] == "True" else None
    try:
        pod: dict[str, Any] = wait_until(f"{name}'s pod on {secret}", rolled, timeout=SETTLE_SECONDS, interval=1.0)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{node.pod_events(NS, name)}\n{node.diagnosis()}") from None
    return pod


def test_only_a_subject_granted_change_tls_takes_the_exception(node: Node, policies_on: str) -> None:
    api = workload(node, "api", secret="api-tls", replicas=1)
    web = workload(node, "web", secret="web-tls")
    assert apply_as(node, api).returncode == 0
    assert apply_as(node, web).returncode == 0
    wait_for_rolled_pod(node, "api", "api-tls")
    stored = template(node, "api")

    swap = changed(api, secret="api-v2-tls", change="api-tls->api-v2-tls")
    # The ordinary user, naming the change, is refused by the policy (RBAC: no change-tls), dry run and real.
    for extra in (["--dry-run=server"], []):
        refused = apply_as(node, swap, f"--as={ORDINARY}", *extra)
        assert refused.returncode != 0, refused.stdout
        assert f"ValidatingAdmissionPolicy '{POLICY}'" in one_line(refused.stderr), refused.stderr
        assert "tls-injector.io/tls-change" in one_line(refused.stderr), refused.stderr
    # The grant alone, without the annotation naming the change, allows nothing.
    bare = apply_as(node, changed(api, secret="api-v2-tls", change=None), f"--as={GRANTED}", "--dry-run=server")
    assert bare.returncode != 0, bare.stdout
    assert POLICY in bare.stderr, bare.stderr
    assert template(node, "api") == stored

    # The granted user: the policy lets it through, then the webhook pods do, and say so (their warning).
    for extra in (["--dry-run=server"], []):
        taken = apply_as(node, swap, f"--as={GRANTED}", *extra)
        assert taken.returncode == 0, taken.stderr
        assert TAKEN in one_line(taken.stderr), taken.stderr
        if extra:
            assert template(node, "api") == stored, "a dry run changed the Deployment"
    now = template(node, "api")["metadata"]
    assert now["annotations"]["tls-injector.io/secret-name"] == "api-v2-tls"
    assert now["annotations"]["tls-injector.io/tls-change"] == "api-tls->api-v2-tls"

    # A second change under the same annotation is refused; the grant for api does not reach web.
    again = apply_as(node, changed(api, tls=False, secret="api-v2-tls", change="api-tls->api-v2-tls"),
                     f"--as={GRANTED}")
    assert again.returncode != 0, again.stdout
    assert POLICY in again.stderr, again.stderr
    elsewhere = apply_as(node, changed(web, tls=False, secret="web-tls", change="web-tls->(off)"), f"--as={GRANTED}")
    assert elsewhere.returncode != 0, elsewhere.stdout
    assert POLICY in elsewhere.stderr, elsewhere.stderr

    # On the node: a webhook pod logged the exception it let through, the reconciler pods told it on the
    # workload, and the workload rolled to a pod mounting the new Secret (issued by the reconciler).
    logs = "".join(node.container_log(INJECTOR_NS, pod["metadata"]["name"], "tls-injector")
                   for pod in webhook_pods(node))
    assert f"TLS exception: update of Deployment {NS}/api" in logs, logs[-3000:]

    def told() -> list[dict[str, Any]]:
        events = node.get_json(f"/api/v1/namespaces/{NS}/events")["items"]
        return [e for e in events if e.get("reason") == "TLSChangeException"
                and e["involvedObject"]["name"] == "api" and "api-tls->api-v2-tls" in e.get("message", "")]
    [event] = wait_until("the reconciler's Event on the workload", told, timeout=SETTLE_SECONDS, interval=1.0)
    assert event["type"] == "Normal"
    pod = wait_for_rolled_pod(node, "api", "api-v2-tls")
    assert "tls-injector.io/injected" in pod["metadata"]["annotations"]
