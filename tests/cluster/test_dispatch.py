"""Every rule's forbidden transition, for every kind it covers, in every namespace shape, sent through the
SHIPPED ValidatingWebhookConfiguration on the real kube-apiserver with the policy component off: the
webhook alone refuses each, and the allowed transitions beside them go through (tests/dispatch_matrix.py
holds the table; tests/shipping/test_dispatch.py the same without a server).

The objects start nothing (no replicas, suspended CronJobs, no node for a DaemonSet): the updates are
what is judged. All are created first (a real CREATE never reaches the validating entries), then each is
updated once, so the whole table costs a few hundred API calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import Installation
from tests.cluster.test_mission import make_namespace
from tests.dispatch_matrix import CASES, KINDS, NAMESPACE_CASES, Case, expected_rule, manifest, template_metadata

ENABLED, PLAIN = "dispatch-enabled", "dispatch-plain"
SHORT = {"Deployment": "d", "StatefulSet": "s", "DaemonSet": "ds", "CronJob": "cj"}
# The rules' policies exported by `tls-injector export-policy` are named tls-injector.<rule>.
POLICY_PREFIX = "tls-injector."


def _calls(admin: kubernetes.client.ApiClient, kind: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(create, patch) of `kind` through the official client."""
    apps, batch = kubernetes.client.AppsV1Api(admin), kubernetes.client.BatchV1Api(admin)
    suffix = {"Deployment": "deployment", "StatefulSet": "stateful_set", "DaemonSet": "daemon_set",
              "CronJob": "cron_job"}[kind]
    api: Any = batch if kind == "CronJob" else apps
    return getattr(api, f"create_namespaced_{suffix}"), getattr(api, f"patch_namespaced_{suffix}")


def _patch(case: Case, kind: str, name: str) -> list[dict[str, Any]]:
    """A JSON patch giving the template the case's new keys (and, for some, another image)."""
    template = "/spec/jobTemplate/spec/template" if kind == "CronJob" else "/spec/template"
    ops = [{"op": "replace", "path": f"{template}/metadata", "value": template_metadata(case.new, app=name)}]
    if case.image_change:
        ops.append({"op": "replace", "path": f"{template}/spec/containers/0/image",
                    "value": "registry.invalid/app:2"})
    return ops


def _message(error: kubernetes.client.ApiException) -> str:
    """The apiserver's Status message (the webhook's denial, quotes unescaped)."""
    try:
        return str(json.loads(error.body or "{}").get("message", "")) or str(error)
    except ValueError:
        return str(error)


@pytest.fixture(scope="module")
def namespaces(cluster: ControlPlane, installed: Installation) -> Iterator[None]:
    make_namespace(cluster, installed.core, ENABLED, {"tls-injector.io/inject": "enabled"})
    make_namespace(cluster, installed.core, PLAIN)
    try:
        yield
    finally:
        for name in (ENABLED, PLAIN):
            installed.core.delete_namespace(name)


def test_the_policy_component_is_off(admin: kubernetes.client.ApiClient, installed: Installation) -> None:
    """The webhook alone: none of the rules' exported policies is bound."""
    api = kubernetes.client.AdmissionregistrationV1Api(admin)
    bound = [b.metadata.name for b in api.list_validating_admission_policy_binding().items
             if b.metadata.name.startswith(POLICY_PREFIX) and b.metadata.name.endswith("-transition")]
    assert bound == []


def test_every_forbidden_transition_is_refused_by_the_shipped_webhook_and_every_allowed_one_goes_through(
    admin: kubernetes.client.ApiClient, installed: Installation, namespaces: None
) -> None:
    sent: list[tuple[Case, str, str, str]] = []
    for index, case in enumerate(CASES):
        namespace = ENABLED if case.shape == "enabled" else PLAIN
        for kind in KINDS:
            name = f"c{index:03d}-{SHORT[kind]}"
            create, _ = _calls(admin, kind)
            create(namespace, manifest(kind, name, namespace, case.old))
            sent.append((case, kind, name, namespace))
    wrong: list[str] = []
    for case, kind, name, namespace in sent:
        _, patch = _calls(admin, kind)
        rule = expected_rule(case, kind)
        where = f"{kind} {namespace}/{name} ({case.id})"
        try:
            patch(name, namespace, _patch(case, kind, name), _content_type="application/json-patch+json")
        except kubernetes.client.ApiException as error:
            message = _message(error)
            if rule is None:
                wrong.append(f"{where}: allowed transition refused: {message}")
            elif 'admission webhook "tls-transitions.' not in message or f'rule "{rule}"' not in message:
                wrong.append(f"{where}: refused, but not by the webhook's rule {rule}: {message}")
            continue
        if rule is not None:
            wrong.append(f"{where}: forbidden transition let through (rule {rule})")
    assert not wrong, "\n".join(wrong)
    assert len(sent) == len(CASES) * len(KINDS)


def test_every_forbidden_namespace_transition_is_refused_by_the_shipped_webhook(
    cluster: ControlPlane, admin: kubernetes.client.ApiClient, installed: Installation
) -> None:
    wrong: list[str] = []
    for index, (rule, old, new, allowed) in enumerate(NAMESPACE_CASES):
        name = f"dispatch-ns-{index}"
        make_namespace(cluster, installed.core, name, old)
        labels: dict[str, str | None] = {key: None for key in old} | dict(new)
        try:
            installed.core.patch_namespace(name, {"metadata": {"labels": labels}},
                                           _content_type="application/merge-patch+json")
            if not allowed:
                wrong.append(f"{name}: {old} -> {new} let through (rule {rule})")
        except kubernetes.client.ApiException as error:
            message = _message(error)
            if allowed or 'admission webhook "tls-transitions.' not in message or f'rule "{rule}"' not in message:
                wrong.append(f"{name}: {old} -> {new}: {message}")
        finally:
            installed.core.delete_namespace(name)
    assert not wrong, "\n".join(wrong)
