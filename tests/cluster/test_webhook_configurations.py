"""`tls-injector.webhook-configurations` on the real kube-apiserver: admission policies do judge webhook
configurations (the apiserver exempts them from webhooks only), so with the reconciler's or the bootstrap
Job's token every attack on the two configurations is refused with 403 by the policy, while their one
legitimate write, caBundle, passes; the member's hub account is refused by RBAC. And the whole lifecycle
under the shipped RBAC and policies, the bootstrap Job's run then the reconciler replacing the webhook's
CA through every state, has zero writes refused.

Its own control plane (the base, certs-bootstrap and the member component applied): the reconciler here
runs in this process on a clock the test moves, and the attacks rewrite the configurations.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.controlplane import ControlPlane
from tests.cluster.controlplane import api_client as cluster_client
from tests.cluster.install import NS, Installation, wait_until
from tests.cluster.tokens import Token, stored
from tests.reconcile.cluster import Clock
from tests.shipping.support import render_with_components
from tls_injector.kube import KubeApi
from tls_injector.kube.config import ClusterConfig, api_client
from tls_injector.pki import load_certificates
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

POLICY = "tls-injector.webhook-configurations"
PATHS = {"mutating": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
         "validating": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"}
MOVED = ("resourceVersion", "generation", "managedFields")


class Plane:
    def __init__(self, plane: ControlPlane, install: Installation) -> None:
        self.plane, self.install = plane, install
        self.tokens = {name: Token(plane, NS, name)
                       for name in ("tls-injector-reconciler", "tls-injector-bootstrap", "tls-injector-hub")}

    def configuration(self, kind: str, name: str = "tls-injector") -> dict[str, Any]:
        return stored(self.plane, f"{PATHS[kind]}/{name}")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    control = ControlPlane(tmp_path_factory.mktemp("webhookcfg-plane")).start()
    try:
        install = Installation(control, cluster_client(control.admin_kubeconfig),
                               Path(tmp_path_factory.mktemp("webhookcfg-install")))
        install.apply_manifests()
        member = render_with_components("manifests/base", "manifests/components/member")
        control.kubectl("apply", "--server-side", "--field-manager=tls-injector-install", "-f", "-",
                        stdin=yaml.safe_dump_all(member))
        yield Plane(control, install)
    finally:
        control.stop()


def without_ca_bundles(obj: dict[str, Any]) -> dict[str, Any]:
    """What the policy keeps: the object less caBundle and what the apiserver moves on every write."""
    copied = copy.deepcopy(obj)
    for key in MOVED:
        copied["metadata"].pop(key, None)
    for entry in copied.get("webhooks") or []:
        entry["clientConfig"].pop("caBundle", None)
    return copied


def ca_bundles(obj: dict[str, Any]) -> set[str]:
    return {entry["clientConfig"].get("caBundle", "") for entry in obj["webhooks"]}


def test_1_the_bootstrap_job_then_a_webhook_ca_replacement_pass_with_zero_writes_refused(plane: Plane) -> None:
    before = {kind: without_ca_bundles(plane.configuration(kind)) for kind in PATHS}
    done = plane.install.bootstrap()  # `tls-injector bootstrap` with the bootstrap Job's token
    assert done.returncode == 0, done.stdout + done.stderr
    first = {kind: plane.configuration(kind) for kind in PATHS}
    assert all(ca_bundles(first[kind]) and "" not in ca_bundles(first[kind]) for kind in PATHS)

    kubeconfig = plane.install.service_account_kubeconfig(NS, "tls-injector-reconciler")
    clock = Clock(datetime.now(UTC))

    def one_pass() -> int:
        api = KubeApi(api_client(ClusterConfig(kubeconfig=kubeconfig)))
        report = Reconciler(api, ReconcileSettings(namespace=NS, ca=CaPolicy(settle=timedelta(minutes=5)),
                                                   pod_certificates="off", webhook=WebhookSettings()),
                            clock=clock).run_pass()
        assert not report.refused, report
        assert not report.failed, report
        assert not report.aborted, report
        return report.write_count

    one_pass()
    plane.install.core.patch_namespaced_secret("tls-injector-webhook-ca", NS, {"metadata": {"annotations": {
        "tls-injector.io/force-replace": "1"}}})
    seen = [ca_bundles(plane.configuration("validating"))]
    for _ in range(20):
        clock.advance(timedelta(hours=2))
        writes = one_pass()
        if ca_bundles(plane.configuration("validating")) != seen[-1]:
            seen.append(ca_bundles(plane.configuration("validating")))
        if writes == 0 and len(seen) >= 3:
            break
    after = {kind: plane.configuration(kind) for kind in PATHS}
    # Both CAs in every caBundle, then the new one alone: the configurations were written at each step.
    assert len(seen) >= 3, seen
    counts = [len(load_certificates(base64.b64decode(next(iter(b))))) for b in seen]
    assert counts[0] == 1, counts
    assert 2 in counts, counts
    assert counts[-1] == 1, counts
    for kind in PATHS:
        assert ca_bundles(after[kind]) != ca_bundles(first[kind]), kind
        assert without_ca_bundles(after[kind]) == without_ca_bundles(first[kind]) == before[kind], kind


def point_at_a_url(obj: dict[str, Any]) -> None:
    entry = obj["webhooks"][0]
    entry["clientConfig"] = {"url": "https://attacker.example:8443/mutate",
                             "caBundle": entry["clientConfig"]["caBundle"]}


def open_every_pod(obj: dict[str, Any]) -> None:
    entry = obj["webhooks"][0]
    entry["namespaceSelector"] = {}
    entry["objectSelector"] = {}
    entry.pop("matchConditions", None)
    entry["failurePolicy"] = "Ignore"


def refuse_every_write(obj: dict[str, Any]) -> None:
    entry = obj["webhooks"][0]
    entry["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "scope": "*",
                       "operations": ["CREATE", "UPDATE", "DELETE"]}]
    entry["namespaceSelector"] = {}
    entry.pop("objectSelector", None)
    entry.pop("matchConditions", None)
    entry["failurePolicy"] = "Fail"
    entry["clientConfig"] = {"url": "https://192.0.2.1:1/never", "caBundle": entry["clientConfig"]["caBundle"]}


def add_entry(obj: dict[str, Any]) -> None:
    extra = copy.deepcopy(obj["webhooks"][0])
    extra["name"] = "extra.tls-injector.io"
    obj["webhooks"].append(extra)


def drop_entry(obj: dict[str, Any]) -> None:
    obj["webhooks"].pop()


def rename_entry(obj: dict[str, Any]) -> None:
    obj["webhooks"][0]["name"] = "renamed.tls-injector.io"


def annotate(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("annotations", {})["cert-manager.io/inject-ca-from"] = "attacker/ca"


ATTACKS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "point the mutating entry at a URL": ("mutating", point_at_a_url),
    "send every pod to the mutating entry, failurePolicy Ignore": ("mutating", open_every_pod),
    "add a mutating entry": ("mutating", add_entry),
    "widen the validating entry to every write, Fail, a dead address": ("validating", refuse_every_write),
    "remove a validating entry": ("validating", drop_entry),
    "rename a validating entry": ("validating", rename_entry),
    "annotate the mutating configuration for another CA injector": ("mutating", annotate),
}


@pytest.mark.parametrize("account", ["tls-injector-reconciler", "tls-injector-bootstrap"])
def test_2_every_attack_with_the_token_is_refused_by_the_policy_and_caBundle_passes(
        plane: Plane, account: str) -> None:
    token = plane.tokens[account]

    def in_force() -> bool:  # a new policy binding is enforced a moment after it is created (a dry run)
        obj = plane.configuration("validating")
        refuse_every_write(obj)
        return token.call("PUT", f"{PATHS['validating']}/tls-injector", obj, dry_run=True).refused_by(POLICY)

    wait_until(f"{POLICY} in force", in_force, timeout=60)
    for what, (kind, attack) in ATTACKS.items():
        obj = plane.configuration(kind)
        attack(obj)
        answer = token.call("PUT", f"{PATHS[kind]}/tls-injector", obj)
        assert answer.refused_by(POLICY), (what, answer)
        assert token.username in answer.text, answer
    # RBAC already refuses what it never granted: create, delete, another configuration, patch.
    other = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": f"planted-{account}"}, "webhooks": []}
    for what, (method, path, body) in {
        "create one": ("POST", PATHS["validating"], other),
        "delete ours": ("DELETE", f"{PATHS['mutating']}/tls-injector", None),
        "patch ours": ("PATCH", f"{PATHS['mutating']}/tls-injector", {"metadata": {"labels": {"x": "y"}}}),
    }.items():
        answer = token.call(method, path, body)
        assert answer.status == 403, (what, answer)

    # The one write it is there for: caBundle (here: the same CA twice over), in every entry.
    for kind, path in PATHS.items():
        obj = plane.configuration(kind)
        for entry in obj["webhooks"]:
            pem = base64.b64decode(entry["clientConfig"]["caBundle"])
            entry["clientConfig"]["caBundle"] = base64.b64encode(pem + pem).decode()
        answer = token.call("PUT", f"{path}/tls-injector", obj)
        assert answer.status == 200, (kind, answer)
        assert ca_bundles(plane.configuration(kind)) == ca_bundles(obj)


def test_3_the_members_hub_token_may_not_touch_them_at_all(plane: Plane) -> None:
    token = plane.tokens["tls-injector-hub"]
    for kind, path in PATHS.items():
        # The least body that names the object: RBAC refuses from the request line and headers alone, and
        # kube-apiserver then closes the connection without reading the body, so a client still sending a
        # whole configuration (about 25 KB) meets a closed socket instead of the 403 (seen on 2 cores).
        obj = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": plane.configuration(kind)["kind"],
               "metadata": {"name": "tls-injector"}}
        answer = token.call("PUT", f"{path}/tls-injector", obj)
        assert answer.refused_by(None), (kind, answer)
        assert token.call("GET", f"{path}/tls-injector").status == 403


def test_4_people_are_not_judged_by_it(plane: Plane) -> None:
    """The operator's own change (here: a label, by the admin) passes: the policy judges our accounts only."""
    obj = plane.configuration("mutating")
    obj["metadata"].setdefault("labels", {})["reviewed"] = "yes"
    done = plane.plane.kubectl("replace", "-f", "-", stdin=yaml.safe_dump(obj))
    assert "replaced" in done.stdout
