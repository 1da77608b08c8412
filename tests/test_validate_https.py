"""/validate over real HTTPS with the handler `serve` builds: kinds x transitions x dry-run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.rules_matrix import (
    ENABLED_NAMESPACE_RULES,
    ENABLED_NAMESPACE_TRANSITIONS,
    EXAMPLE_RULES,
    FIX,
    NAMESPACE_ENABLED_WARNING,
    NAMESPACE_FIX,
    NAMESPACE_TRANSITIONS,
    OFF,
    ON_X,
    ON_Y,
    ROLL,
    SIDECAR_MATRIX,
    WORKLOAD_KINDS,
    WORKLOAD_TRANSITIONS,
    Transition,
    cronjob,
    namespace,
    sei_node,
    templated,
    with_image,
    workload,
)
from tests.support.reviews import review
from tests.support.server import RunningServer, running_server
from tls_injector.cli import admission_handlers
from tls_injector.names import MODE_ANNOTATION, MODE_POD_CERTIFICATE
from tls_injector.settings import ServeSettings

APPS = ("apps", "v1")
SEI = ("example.com", "v1", "SeiNode")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    handlers = admission_handlers(ServeSettings(rules_file=EXAMPLE_RULES))
    with running_server(tmp_path_factory.mktemp("srv"), validate=handlers.validate,
                        validate_enabled_namespace=handlers.validate_enabled_namespace) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def post(client: httpx.Client, sent: dict[str, Any], path: str = "/validate") -> dict[str, Any]:
    response = client.post(path, json=sent)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["response"]["uid"] == sent["request"]["uid"]
    assert "patch" not in body["response"]
    assert "patchType" not in body["response"]
    return body["response"]


def assert_verdict(answer: dict[str, Any], *, allowed: bool, warns: bool, rule: str) -> None:
    assert answer["allowed"] is allowed, answer
    if allowed:
        assert "status" not in answer
        assert any(ROLL in w for w in answer.get("warnings", [])) is warns
        return
    assert answer["status"]["code"] == 422
    assert answer["status"]["reason"] == "Invalid"
    assert f'rule "{rule}"' in answer["status"]["message"]
    assert FIX in answer["status"]["message"]
    assert "warnings" not in answer


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize("transition", WORKLOAD_TRANSITIONS, ids=lambda t: t.name)
def test_workload_updates_get_the_transition_verdict_with_or_without_dry_run(
    client: httpx.Client, transition: Transition, kind: str, dry_run: bool
) -> None:
    old, new = workload(kind, transition.old), with_image(workload(kind, transition.new), "nginx:1.28")
    sent = review(operation="UPDATE", obj=new, old=old, kind=(*APPS, kind), namespace="shop", dry_run=dry_run)
    answer = post(client, sent)
    assert_verdict(answer, allowed=transition.allowed, warns=transition.warns, rule="workload-tls-transition")


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
@pytest.mark.parametrize("case", SIDECAR_MATRIX, ids=lambda case: case[0])
def test_the_seed_rule_judges_a_custom_resource_over_https(
    client: httpx.Client, case: tuple[str, Any, Any, bool], dry_run: bool
) -> None:
    _, old_tls, new_tls, allowed = case
    sent = review(operation="UPDATE", obj=sei_node(new_tls), old=sei_node(old_tls), kind=SEI, dry_run=dry_run)
    answer = post(client, sent)
    enables = old_tls is None and new_tls is not None
    assert_verdict(answer, allowed=allowed, warns=enables, rule="sidecar-tls-transition")


def test_a_denial_names_the_field_and_the_old_and_new_values(client: httpx.Client) -> None:
    sent = review(operation="UPDATE", obj=sei_node({"secretName": "y-tls"}), old=sei_node({"secretName": "x-tls"}),
                  kind=SEI, namespace="chain")
    message = post(client, sent)["status"]["message"]
    assert 'spec.sidecar.tls: {"secretName":"x-tls"} -> {"secretName":"y-tls"}' in message
    assert "example.com/v1 SeiNode chain/node-0" in message


def test_a_disable_shows_the_label_going_absent(client: httpx.Client) -> None:
    sent = review(operation="UPDATE", obj=workload("Deployment", (None, "x-tls")), old=workload("Deployment", ON_X),
                  kind=(*APPS, "Deployment"), namespace="shop")
    message = post(client, sent)["status"]["message"]
    assert 'spec.template.metadata.labels["tls-injector.io/inject"]: "true" -> (absent)' in message
    assert "secret-name\"]:" not in message  # unchanged fields are not listed


@pytest.mark.parametrize("operation", ["CREATE", "DELETE", "CONNECT"])
def test_operations_other_than_update_are_allowed_without_judging(client: httpx.Client, operation: str) -> None:
    old, new = workload("Deployment", ON_X), workload("Deployment", ON_X)
    objects = {"CREATE": (new, None), "DELETE": (None, old), "CONNECT": ({"kind": "PodAttachOptions"}, None)}[operation]
    sent = review(operation=operation, obj=objects[0], old=objects[1], kind=(*APPS, "Deployment"))
    answer = post(client, sent)
    assert answer == {"uid": sent["request"]["uid"], "allowed": True}


def test_a_kind_without_rules_is_allowed_whatever_changes(client: httpx.Client) -> None:
    labels = {"tls-injector.io/inject": "true"}
    old = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": labels}}
    new = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    answer = post(client, review(operation="UPDATE", obj=new, old=old, kind=("", "v1", "ConfigMap")))
    assert answer["allowed"] is True


def test_a_rule_that_cannot_be_evaluated_denies_with_the_error_not_a_500(client: httpx.Client) -> None:
    broken = {**sei_node(None), "spec": {"sidecar": "not an object"}}
    answer = post(client, review(operation="UPDATE", obj=broken, old=broken, kind=SEI))
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    assert 'rule "sidecar-tls-transition" could not be evaluated' in answer["status"]["message"]


def test_a_dry_run_gets_the_very_same_answer_as_the_real_request(client: httpx.Client) -> None:
    old, new = workload("StatefulSet", ON_X), workload("StatefulSet", (None, "x-tls"))
    real = review(operation="UPDATE", obj=new, old=old, kind=(*APPS, "StatefulSet"), namespace="shop")
    dry = review(operation="UPDATE", obj=new, old=old, kind=(*APPS, "StatefulSet"), namespace="shop", dry_run=True)
    real_answer, dry_answer = post(client, real), post(client, dry)
    assert real_answer["allowed"] is False
    assert {**dry_answer, "uid": real_answer["uid"]} == real_answer


BATCH_CRONJOB = ("batch", "v1", "CronJob")


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
@pytest.mark.parametrize("transition", WORKLOAD_TRANSITIONS, ids=lambda t: t.name)
def test_cronjob_updates_get_the_transition_verdict_on_the_job_template(
    client: httpx.Client, transition: Transition, dry_run: bool
) -> None:
    old, new = cronjob(transition.old), cronjob(transition.new, image="busybox:1.37")
    sent = review(operation="UPDATE", obj=new, old=old, kind=BATCH_CRONJOB, namespace="shop", dry_run=dry_run)
    assert_verdict(post(client, sent), allowed=transition.allowed, warns=transition.warns,
                   rule="cronjob-tls-transition")


def test_a_cronjob_denial_names_the_job_template_field(client: httpx.Client) -> None:
    sent = review(operation="UPDATE", obj=cronjob(ON_Y), old=cronjob(ON_X), kind=BATCH_CRONJOB, namespace="shop")
    message = post(client, sent)["status"]["message"]
    assert ('spec.jobTemplate.spec.template.metadata.annotations["tls-injector.io/secret-name"]: '
            '"x-tls" -> "y-tls"') in message
    assert "batch/v1 CronJob shop/nightly" in message


@pytest.mark.parametrize("case", NAMESPACE_TRANSITIONS, ids=lambda case: case[0])
def test_namespace_updates_may_add_the_opt_in_but_not_remove_or_change_it(
    client: httpx.Client, case: tuple[str, str | None, str | None, bool]
) -> None:
    _, old_label, new_label, allowed = case
    old, new = namespace(old_label), namespace(new_label, team="checkout")
    # For a Namespace the apiserver sends its own name as the request's namespace.
    sent = review(operation="UPDATE", obj=new, old=old, kind=("", "v1", "Namespace"), namespace="shop")
    answer = post(client, sent)
    assert answer["allowed"] is allowed, answer
    if allowed:
        enables = old_label != "enabled" and new_label == "enabled"
        assert any(NAMESPACE_ENABLED_WARNING in w for w in answer.get("warnings", [])) is enables
        return
    assert answer["status"]["code"] == 422
    message = answer["status"]["message"]
    assert message.startswith("update of v1 Namespace shop rejected by 1 rule(s):")
    assert 'rule "namespace-tls-transition"' in message
    assert 'metadata.labels["tls-injector.io/inject"]: "enabled" -> ' in message
    assert NAMESPACE_FIX in message


ENABLED_PATH = "/validate/enabled-namespace"


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
@pytest.mark.parametrize("kind", [*WORKLOAD_KINDS, "CronJob"])
@pytest.mark.parametrize("transition", ENABLED_NAMESPACE_TRANSITIONS, ids=lambda t: t.name)
def test_workloads_in_an_enabled_namespace_may_not_opt_out_or_swap(
    client: httpx.Client, transition: Transition, kind: str, dry_run: bool
) -> None:
    """The apiserver sends an update from an enabled namespace to this path alone: its answer is the verdict."""
    old, new = templated(kind, transition.old), templated(kind, transition.new)
    gvk = BATCH_CRONJOB if kind == "CronJob" else (*APPS, kind)
    sent = review(operation="UPDATE", obj=new, old=old, kind=gvk, namespace="shop", dry_run=dry_run)
    assert_verdict(post(client, sent, ENABLED_PATH), allowed=transition.allowed, warns=transition.warns,
                   rule=ENABLED_NAMESPACE_RULES[kind])


def test_each_path_judges_by_its_own_kind_of_namespace(client: httpx.Client) -> None:
    """An opt-out of an unlabelled template is nobody's business outside an enabled namespace, and a
    disable inside one; dropping a "true" is the reverse. Neither path runs the other's rules."""
    old, new = workload("Deployment", (None, None)), workload("Deployment", ("false", None))
    sent = review(operation="UPDATE", obj=new, old=old, kind=(*APPS, "Deployment"), namespace="shop")
    assert post(client, sent)["allowed"] is True
    assert post(client, sent, ENABLED_PATH)["allowed"] is False
    old, new = workload("Deployment", ON_X), workload("Deployment", (None, "x-tls"))
    sent = review(operation="UPDATE", obj=new, old=old, kind=(*APPS, "Deployment"), namespace="shop")
    assert_verdict(post(client, sent), allowed=False, warns=False, rule="workload-tls-transition")
    assert post(client, sent, ENABLED_PATH) == {"uid": sent["request"]["uid"], "allowed": True}


def test_the_rules_of_every_namespace_hold_on_the_enabled_path_too(client: httpx.Client) -> None:
    """An unlabelled template in an enabled namespace has TLS, so moving it back from pod certificates to
    the Secret is refused there as anywhere (workload-tls-mode-transition holds in all namespaces)."""
    old, new = workload("Deployment", OFF), workload("Deployment", OFF)
    old["spec"]["template"]["metadata"]["annotations"] = {MODE_ANNOTATION: MODE_POD_CERTIFICATE}
    sent = review(operation="UPDATE", obj=new, old=old, kind=(*APPS, "Deployment"), namespace="shop")
    answer = post(client, sent, ENABLED_PATH)
    assert answer["allowed"] is False
    assert 'rule "workload-tls-mode-transition"' in answer["status"]["message"]
