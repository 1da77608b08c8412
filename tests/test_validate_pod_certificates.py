"""/validate over HTTPS for the pod-certificate mode: which way a workload may move between modes, and the
warning a server-side dry run gets naming what the workload's pods will get."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.rules_matrix import WORKLOAD_KINDS, workload
from tests.support.reviews import review
from tests.support.server import running_server
from tests.test_validate_https import post
from tls_injector.cli import build_handlers
from tls_injector.names import MODE_ANNOTATION
from tls_injector.settings import ServeSettings

APPS = ("apps", "v1")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    _, validate = build_handlers(ServeSettings(pod_certificates=True))
    with running_server(tmp_path_factory.mktemp("srv"), validate=validate) as server, server.client() as c:
        yield c


def _in_mode(kind: str, mode: str | None) -> dict[str, Any]:
    obj = workload(kind, ("true", None))
    if mode is not None:
        obj["spec"]["template"]["metadata"]["annotations"] = {MODE_ANNOTATION: mode}
    return obj


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize(("old", "new", "allowed"), [
    (None, "pod-certificate", True),
    ("secret", "pod-certificate", True),
    ("pod-certificate", "pod-certificate", True),
    ("pod-certificate", "secret", False),
    ("pod-certificate", None, False),
    (None, "secret", True),
])
def test_a_workload_may_move_to_pod_certificates_in_place_but_not_back(
        client: httpx.Client, kind: str, old: str | None, new: str | None, allowed: bool) -> None:
    sent = review(operation="UPDATE", obj=_in_mode(kind, new), old=_in_mode(kind, old), kind=(*APPS, kind),
                  namespace="shop")
    answer = post(client, sent)
    assert answer["allowed"] is allowed, answer
    if not allowed:
        assert answer["status"]["code"] == 422
        assert 'rule "workload-tls-mode-transition"' in answer["status"]["message"]
        assert "private key into a Secret" in answer["status"]["message"]
    elif old != "pod-certificate" and new == "pod-certificate":
        assert any("per-pod keys" in w for w in answer["warnings"])


@pytest.mark.parametrize(("mode", "says"), [
    ("pod-certificate", "a per-pod ECDSAP256 key and certificate from signer tls-injector.io/serving"),
    (None, "the certificate of Secret web-tls at /etc/tls-injector/certs, and trust from ConfigMap "
           "tls-injector-trust-bundle"),
])
def test_a_server_side_dry_run_names_what_the_pods_will_get(client: httpx.Client, mode: str | None,
                                                             says: str) -> None:
    for operation, old in (("CREATE", None), ("UPDATE", _in_mode("Deployment", mode))):
        sent = review(operation=operation, obj=_in_mode("Deployment", mode), old=old, kind=(*APPS, "Deployment"),
                      namespace="shop", dry_run=True)
        answer = post(client, sent)
        assert answer["allowed"] is True
        (line,) = [w for w in answer.get("warnings", []) if w.startswith("tls-injector: pods of Deployment web")]
        assert says in line
        if mode == "pod-certificate":
            assert "ClusterTrustBundle tls-injector.io:serving:cas" in line


def test_a_real_apply_gets_no_preview_and_an_opted_out_workload_none_either(client: httpx.Client) -> None:
    real = review(operation="CREATE", obj=_in_mode("Deployment", None), kind=(*APPS, "Deployment"), namespace="shop")
    assert "warnings" not in post(client, real)
    opted_out = workload("Deployment", ("false", None))
    dry = review(operation="CREATE", obj=opted_out, kind=(*APPS, "Deployment"), namespace="shop", dry_run=True)
    assert "warnings" not in post(client, dry)


def test_where_pod_certificates_are_not_served_the_preview_says_the_secret_is_used(tmp_path: Any) -> None:
    _, validate = build_handlers(ServeSettings())
    with running_server(tmp_path, validate=validate) as server, server.client() as c:
        sent = review(operation="CREATE", obj=_in_mode("Deployment", "pod-certificate"), kind=(*APPS, "Deployment"),
                      namespace="shop", dry_run=True)
        (line,) = post(c, sent)["warnings"]
        assert "Secret web-tls" in line
        assert "pod certificates are not served" in line
