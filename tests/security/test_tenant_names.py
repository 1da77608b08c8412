"""A name a tenant writes never reaches a request path unvetted (docs/security.md, "Names a tenant writes").

The HTTP client folds `..` out of a path before sending it, so `keystore-password-secret: ../../../secrets`
was GET /api/v1/secrets (every Secret of the cluster, read whole), `../../team-b/secrets/kafka-keystore`
encrypted team-a's keystore with team-b's password, and `../../kube-system/secrets/bootstrap-token-abcdef`
was read and its type told in team-a's Event. Here the real reconciler runs against the API emulator, which
logs every request as the server saw it (after the client's folding): a hostile value is refused with its
reason (an Event on the workload, the pass's report) and nothing outside the workload's namespace is read.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector.reconcile.loop.runner import summary

NS, OTHER = "team-a", "team-b"
KEYSTORE, PASSWORD_SECRET = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
SECRET_NAME = "tls-injector.io/secret-name"
# Each value a tenant of team-a wrote in the finding, and the request the client made of it before.
HOSTILE_PASSWORDS = [
    "../../../secrets",  # GET /api/v1/secrets: every Secret of the cluster
    "../../../pods",  # GET /api/v1/pods: every Pod
    f"../../{OTHER}/secrets/kafka-keystore",  # another team's password
    "../../kube-system/secrets/bootstrap-token-abcdef",  # an existence and type oracle
    "kafka-keystore/../../../../secrets",
    "..", ".", "a/b", "pw?watch=true", "pw#x", "%2e%2e", "p\nw", "p w", "Kafka-Keystore", "x" * 254,
]


def _secret(emu: Emulator, name: str, ns: str, *, type_: str = "Opaque") -> None:
    emu.add({"apiVersion": "v1", "kind": "Secret", "type": type_, "metadata": {"name": name, "namespace": ns},
             "data": {"keystore.password": base64.b64encode(b"team-b-password").decode()}})


def _cluster(emu: Emulator) -> None:
    for ns in (OWN_NS, NS, OTHER):  # kube-system is there from the start
        namespace(emu, ns)
    _secret(emu, "kafka-keystore", OTHER)
    _secret(emu, "bootstrap-token-abcdef", "kube-system", type_="bootstrap.kubernetes.io/token")


def _outside(emu: Emulator) -> list[Any]:
    """Requests the pass made that read what team-a's workload may not name: any Secret or Pod of another
    tenant's namespace, or any named object outside team-a and the injector's namespace."""
    return [r for r in emu.log if r.namespace in (OTHER, "kube-system") or (r.name and r.namespace not in (NS, OWN_NS))]


def _lists(emu: Emulator) -> list[tuple[str, str, str | None]]:
    return sorted((r.verb, r.resource, r.namespace) for r in emu.log if r.verb == "list")


@pytest.mark.parametrize("value", HOSTILE_PASSWORDS, ids=lambda v: repr(v)[:30])
def test_a_hostile_keystore_password_secret_is_refused_and_nothing_outside_the_namespace_is_read(
        kubeapi: Emulator, value: str) -> None:
    _cluster(kubeapi)
    deployment(kubeapi, "billing", NS, annotations={KEYSTORE: "pkcs12", PASSWORD_SECRET: value})
    baseline = _baseline_lists()
    kubeapi.reset_log()
    report = reconciler(kubeapi, Clock()).run_pass()

    assert _outside(kubeapi) == []
    assert _lists(kubeapi) == baseline  # no list the pass would not make anyway (no GET /api/v1/secrets)
    [message] = report.keystores_refused
    assert "is no Secret name" in message
    assert "Deployment/billing" in message
    assert summary(report).startswith("NOT converged: 3 writes (3 create); 1 keystore refused")
    [event] = [e for e in kubeapi.objects("events", NS) if e.get("reason") == "KeystoreRefused"]
    assert event["involvedObject"]["name"] == "billing"
    assert "is no Secret name" in event["message"]
    assert "team-b-password" not in str(kubeapi.objects("events", NS))
    # The certificate is issued all the same; no keystore is made with anyone's password.
    assert set(data(kubeapi.get("secrets", "billing-tls", NS))) == {"tls.crt", "tls.key", "ca.crt"}


_BASELINE: list[list[tuple[str, str, str | None]]] = []


def _baseline_lists() -> list[tuple[str, str, str | None]]:
    """The lists one pass makes over the same cluster when the workload names a legal password Secret."""
    if not _BASELINE:
        with running_emulator(seed=0) as emu:
            _cluster(emu)
            deployment(emu, "billing", NS, annotations={KEYSTORE: "pkcs12", PASSWORD_SECRET: "kafka-keystore"})
            emu.reset_log()
            reconciler(emu, Clock()).run_pass()
            _BASELINE.append(_lists(emu))
    return _BASELINE[0]


@pytest.mark.parametrize("value", ["../../../secrets", f"../../{OTHER}/secrets/kafka-keystore", "a/b", "..",
                                   "Web-TLS", "web_tls", "-web", "x" * 254])
def test_a_secret_name_that_is_none_is_refused_whole_and_nothing_is_read_or_written_under_it(
        kubeapi: Emulator, value: str) -> None:
    _cluster(kubeapi)
    deployment(kubeapi, "web", NS, annotations={SECRET_NAME: value})
    deployment(kubeapi, "api", NS)
    kubeapi.reset_log()
    report = reconciler(kubeapi, Clock()).run_pass()

    assert _outside(kubeapi) == []
    assert [r for r in kubeapi.log if r.resource == "secrets" and r.name not in (None, "api-tls")
            and r.namespace == NS] == []
    assert [r.name for r in kubeapi.writes() if r.resource == "secrets" and r.namespace == NS] == ["api-tls"]
    [message] = report.secret_names_refused
    assert "Deployment/web" in message
    assert "no Secret name" in message
    assert "NOT converged" in summary(report)
    assert "1 Secret name refused" in summary(report)
    [event] = [e for e in kubeapi.objects("events", NS) if e.get("reason") == "SecretNameRefused"]
    assert event["involvedObject"]["name"] == "web"
    rec = reconciler(kubeapi, Clock())
    rec.run_pass()
    assert rec.status is not None
    [status] = [w for w in rec.status.workloads if w.workloads == ("Deployment/web",)]
    [ready] = [c for c in status.conditions if c.type == "Ready"]
    assert (ready.status, ready.reason) == ("False", "SecretNameRefused")
    assert "no Secret name" in ready.message


def test_a_legal_secret_name_is_issued_as_before(kubeapi: Emulator) -> None:
    _cluster(kubeapi)
    deployment(kubeapi, "web", NS, annotations={SECRET_NAME: "a." + "b" * 251})  # 253: the longest legal
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.converged
    assert report.secret_names_refused == []
    assert "tls.crt" in data(kubeapi.get("secrets", "a." + "b" * 251, NS))
