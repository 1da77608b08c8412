"""/mutate over real HTTPS in both modes: the pod-certificate mode projects `podCertificate` and
`clusterTrustBundle` at the same paths the Secret and ConfigMap would use; the patched Pod is valid
against the Kubernetes 1.37 schema, reinvocation adds nothing, and a pod of either mode in one cluster
gets what it asked for. The patched Pod then goes to the signer, which issues what the projection asks."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.kubeapi import running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tests.support.kubelet import NODE, Kubelet, controller_defaults
from tests.support.reviews import fixture
from tests.support.server import running_server
from tests.test_mutate_https import again, applied, post
from tls_injector.cli import build_handlers
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.cli.serve_cluster import webhook_pod_certificates as _webhook_pod_certificates
from tls_injector.names import INJECTED_ANNOTATION, MODE_ANNOTATION, SIGNER_NAME
from tls_injector.pki import load_certificates, verify_server
from tls_injector.settings import ServeSettings

PROJECTED_CERT = {"name": "tls-injector-cert", "projected": {"sources": [
    {"podCertificate": {"signerName": SIGNER_NAME, "keyType": "ECDSAP256",
                        "certificateChainPath": "tls.crt", "keyPath": "tls.key"}},
    {"clusterTrustBundle": {"name": "tls-injector.io:serving:cas", "path": "ca.crt"}},
]}}
PROJECTED_TRUST = {"name": "tls-injector-trust", "projected": {"sources": [
    {"clusterTrustBundle": {"name": "tls-injector.io:serving:cas", "path": "ca-bundle.crt"}}]}}
SECRET_VOLUMES = [{"name": "tls-injector-cert", "secret": {"secretName": "web-tls"}},
                  {"name": "tls-injector-trust", "configMap": {"name": "tls-injector-trust-bundle"}}]


def _server(tmp: Any, settings: ServeSettings) -> Iterator[httpx.Client]:
    mutate, validate = build_handlers(settings)
    with running_server(tmp, mutate=mutate, validate=validate) as server, server.client() as c:
        yield c


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The webhook of a cluster that serves pod certificates; pods choose, the default stays Secret."""
    yield from _server(tmp_path_factory.mktemp("srv"), ServeSettings(pod_certificates=True))


@pytest.fixture(scope="module")
def not_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from _server(tmp_path_factory.mktemp("old"), ServeSettings())


def _asking(mode: str | None, *, env: bool = False) -> dict[str, Any]:
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    notes = sent["request"]["object"]["metadata"]["annotations"]
    if mode:
        notes[MODE_ANNOTATION] = mode
    if env:
        notes["tls-injector.io/env"] = "true"
    return sent


def test_a_pod_asking_for_pod_certificates_gets_them_at_the_same_paths_and_reinvocation_adds_nothing(
        served: httpx.Client) -> None:
    sent = _asking("pod-certificate", env=True)
    response, ops = post(served, sent)
    assert response["allowed"] is True
    pod = applied(sent, ops)  # valid against the 1.37 schema, which has both projections
    assert pod["spec"]["volumes"][1:] == [PROJECTED_CERT, PROJECTED_TRUST]
    mounts = pod["spec"]["containers"][0]["volumeMounts"][1:]
    assert mounts == [{"name": "tls-injector-cert", "mountPath": "/etc/tls-injector/certs", "readOnly": True},
                      {"name": "tls-injector-trust", "mountPath": "/etc/tls-injector/trust", "readOnly": True}]
    assert {e["value"] for e in pod["spec"]["containers"][0]["env"]} == {"/etc/tls-injector/trust/ca-bundle.crt"}
    record = json.loads(pod["metadata"]["annotations"][INJECTED_ANNOTATION])
    assert (record["mode"], record["secret"], record["signer"]) == ("pod-certificate", "", SIGNER_NAME)
    assert post(served, again(sent, pod)) == ({"uid": sent["request"]["uid"], "allowed": True}, None)
    # The apiserver defaults the projected volume's defaultMode before a reinvocation: still ours.
    defaulted = copy.deepcopy(pod)
    for volume in defaulted["spec"]["volumes"][1:]:
        volume["projected"]["defaultMode"] = 420
    assert post(served, again(sent, defaulted))[1] is None


def test_in_one_cluster_pods_get_the_mode_they_ask_for(served: httpx.Client) -> None:
    for mode, volumes in ((None, SECRET_VOLUMES), ("secret", SECRET_VOLUMES),
                          ("pod-certificate", [PROJECTED_CERT, PROJECTED_TRUST])):
        sent = _asking(mode)
        pod = applied(sent, post(served, sent)[1])
        assert pod["spec"]["volumes"][1:] == volumes, mode


def test_the_default_mode_applies_to_pods_that_do_not_choose(tmp_path: Any) -> None:
    for client in _server(tmp_path, ServeSettings(pod_certificates=True, default_mode="pod-certificate")):
        pod = applied(sent := _asking(None), post(client, sent)[1])
        assert pod["spec"]["volumes"][1:] == [PROJECTED_CERT, PROJECTED_TRUST]
        pod = applied(sent := _asking("secret"), post(client, sent)[1])
        assert pod["spec"]["volumes"][1:] == SECRET_VOLUMES


def test_where_pod_certificates_are_not_served_the_pod_gets_the_secret_and_a_warning(
        not_served: httpx.Client) -> None:
    sent = _asking("pod-certificate")
    response, ops = post(not_served, sent)
    assert applied(sent, ops)["spec"]["volumes"][1:] == SECRET_VOLUMES
    assert any("pod certificates are not served" in w for w in response["warnings"])


def test_an_unknown_mode_is_refused_with_the_choices(served: httpx.Client) -> None:
    response, ops = post(served, _asking("native"))
    assert ops is None
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert "pod-certificate" in response["status"]["message"]


def test_the_patched_pods_projection_is_what_the_signer_issues_and_its_bundle_verifies(
        served: httpx.Client) -> None:
    """The chain: the webhook's patch -> the kubelet's request from that projection -> the signer's answer ->
    the ClusterTrustBundle the projection names, all resolved as the kubelet resolves the volumes."""
    sent = _asking("pod-certificate")
    pod = applied(sent, post(served, sent)[1])
    clock = Clock()
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        controller_defaults(emu, "demo")
        created = emu.add({**pod, "metadata": {**pod["metadata"], "name": "web-7d4b9c8f6d-x1z2q", "namespace": "demo"},
                           "spec": {**pod["spec"], "nodeName": NODE}})
        node = Kubelet(emu)
        node.start(created)
        assert reconciler(emu, clock).run_pass().converged
        volumes = node.resolve(created)
        chain = load_certificates(volumes["tls-injector-cert"]["tls.crt"].content)
        for trust in (volumes["tls-injector-cert"]["ca.crt"], volumes["tls-injector-trust"]["ca-bundle.crt"]):
            clock.advance(timedelta(minutes=1))
            verify_server(chain[0], chain[1:], trusted=load_certificates(trust.content),
                          dns_name="web.demo.svc.cluster.local", now=clock.now)
        assert emu.get("secrets", "web-tls", "demo") is None  # no Secret: the key never left the node


def test_a_truststore_request_is_served_beside_the_secret_and_explained_away_with_pod_certificates(
        served: httpx.Client) -> None:
    for mode, warned in (("secret", False), ("pod-certificate", True)):
        sent = _asking(mode)
        sent["request"]["object"]["metadata"]["annotations"]["tls-injector.io/truststore"] = "pkcs12"
        response, ops = post(served, sent)
        applied(sent, ops)
        assert any("no PKCS#12 truststore with pod certificates" in w for w in response.get("warnings", [])) is warned


@pytest.mark.parametrize(("flags", "certificates", "expected"), [
    (["--pod-certificates", "on", "--no-reconciler"], (), (True, "on (--pod-certificates)")),
    (["--pod-certificates", "off"], ("v1",), (False, "off (--pod-certificates)")),
    (["--no-reconciler"], ("v1",), (False, "off (auto, and no API access")),
    ([], ("v1",), (True, "on (auto: certificates.k8s.io/v1)")),
    ([], ("v1beta1",), (True, "on (auto: certificates.k8s.io/v1beta1)")),
    ([], (), (False, "off (auto: not served)")),
])
def test_serve_finds_out_whether_to_inject_pod_certificates_only_where_it_may_ask(
        flags: list[str], certificates: tuple[str, ...], expected: tuple[bool, str]) -> None:
    with running_emulator(certificates=certificates) as emu:
        args = _parser().parse_args(["serve", "--server", emu.url, *flags])
        enabled, why = _webhook_pod_certificates(args)
    assert enabled is expected[0]
    assert why.startswith(expected[1])
