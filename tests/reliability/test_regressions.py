"""Inputs the fuzzing found that once crashed the server, kept as plain cases."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.reviews import answer, decode, review
from tests.support.server import running_server
from tls_injector.admission import BadReview
from tls_injector.cli import build_handlers
from tls_injector.rules.judge import MAX_SELF_DEPTH
from tls_injector.settings import ServeSettings


@pytest.mark.parametrize("operation", [[], ["CREATE"], {"op": "CREATE"}])
def test_an_operation_that_is_an_array_or_object_is_a_bad_review_not_a_type_error(operation: object) -> None:
    sent = review()
    sent["request"]["operation"] = operation
    with pytest.raises(BadReview, match=r"request\.operation must be one of"):
        decode(sent)


def test_an_unhashable_operation_over_https_is_a_400_with_a_reason(tmp_path: Path) -> None:
    sent = review()
    sent["request"]["operation"] = ["CREATE"]
    with running_server(tmp_path) as server, server.client() as client:
        response = client.post("/mutate", json=sent)
    assert response.status_code == 400
    assert "request.operation must be one of" in response.json()["error"]


def nested(depth: int) -> object:
    value: object = "web-tls"
    for _ in range(depth):
        value = {"a": [value]}
    return value


def test_a_denied_change_to_a_value_nested_too_deep_to_print_is_still_a_denial_with_a_message() -> None:
    old = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"template": {"metadata": {"labels": {"tls-injector.io/inject": "true"},
                                              "annotations": {"tls-injector.io/secret-name": nested(200)}}}}}
    new = copy.deepcopy(old)
    new["spec"]["template"]["metadata"]["annotations"]["tls-injector.io/secret-name"] = "other-tls"
    _, validate = build_handlers(ServeSettings())
    response = answer(validate, review(operation="UPDATE", kind=("apps", "v1", "Deployment"), obj=new, old=old))
    assert response["allowed"] is False
    # Since the depth limit, a `self` this deep is denied unevaluated, with the reason, before any walk.
    assert f"nested deeper than {MAX_SELF_DEPTH} levels" in response["status"]["message"]
