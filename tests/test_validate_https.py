"""/validate over real HTTPS with the handler `serve` builds: kinds x transitions x dry-run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.cli import build_handlers
from app.settings import ServeSettings
from tests.rules_matrix import (
    EXAMPLE_RULES,
    FIX,
    ON_X,
    ROLL,
    SIDECAR_MATRIX,
    WORKLOAD_KINDS,
    WORKLOAD_TRANSITIONS,
    Transition,
    sei_node,
    with_image,
    workload,
)
from tests.support.reviews import review
from tests.support.server import RunningServer, running_server

APPS = ("apps", "v1")
SEI = ("example.com", "v1", "SeiNode")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    _, validate = build_handlers(ServeSettings(rules_file=EXAMPLE_RULES))
    with running_server(tmp_path_factory.mktemp("srv"), validate=validate) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def post(client: httpx.Client, sent: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/validate", json=sent)
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
