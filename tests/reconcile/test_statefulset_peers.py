"""Issue 39, point 2: a StatefulSet's pods are dialled by their per-pod names through its governing
headless Service (`<pod>.<service>.<namespace>.svc[.<domain>]`), as a database's nodes find each other.

Secret mode: the one certificate the pods share names `*.<service>.<ns>.svc` and
`*.<service>.<ns>.svc.<domain>` when spec.serviceName names a Service of the namespace that selects the
pods, and nothing of the kind otherwise. Pod-certificate mode: each pod its own exact name. Checked by real
TLS handshakes (OpenSSL through the ssl module) with the trust a peer pod mounts.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from tests.kubeapi import Emulator, running_emulator
from tests.pki.tls import Party, handshake
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector.pki import dns_sans, load_certificates

NS = "team-a"
PEERS = ["*.web.team-a.svc", "*.web.team-a.svc.cluster.local"]
OWN = ["web.team-a.svc", "web.team-a.svc.cluster.local"]


def _service(emu: Emulator, name: str, ns: str = NS, *, app: str = "web", headless: bool = True) -> None:
    spec: dict[str, Any] = {"selector": {"app": app}, "ports": [{"port": 7000}]}
    emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
             "spec": {**spec, "clusterIP": "None"} if headless else spec})


def _cluster(emu: Emulator) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, NS)
    namespace(emu, "team-b")
    deployment(emu, "web", NS, kind="StatefulSet")  # spec.serviceName: web, pods labelled app=web
    deployment(emu, "db", NS, kind="StatefulSet")


def _sans(emu: Emulator, secret: str) -> list[str]:
    return sorted(dns_sans(load_certificates(data(emu.get("secrets", secret, NS))["tls.crt"])[0]))


def _peer_dials(emu: Emulator, hostname: str) -> str:
    """web-0 dials a peer: the server presents the Secret's chain; the client trusts its own mounted ca.crt."""
    leaf = data(emu.get("secrets", "web-tls", NS))
    return handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=leaf["ca.crt"], hostname=hostname)


def test_a_statefulsets_certificate_names_its_pods_through_its_governing_service(kubeapi: Emulator) -> None:
    _cluster(kubeapi)
    _service(kubeapi, "web")
    _service(kubeapi, "db", app="db")
    assert reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass().converged
    assert _sans(kubeapi, "web-tls") == sorted(PEERS + OWN)
    for hostname in ("web-2.web.team-a.svc.cluster.local", "web-0.web.team-a.svc", "web.team-a.svc"):
        assert _peer_dials(kubeapi, hostname).startswith("TLSv1")
    # Another Service's pods, two labels deep, another namespace, the bare Service domain: none verify.
    for hostname in ("web-2.db.team-a.svc.cluster.local", "a.web-2.web.team-a.svc", "web-2.web.team-b.svc",
                     "x.team-a.svc", "web-2.web"):
        with pytest.raises(ssl.SSLCertVerificationError):
            _peer_dials(kubeapi, hostname)


@pytest.mark.parametrize("case", ["no-service", "selects-other-pods", "other-namespace", "not-governing"])
def test_no_wildcard_without_a_governing_service_of_the_namespace_selecting_the_pods(
        kubeapi: Emulator, case: str) -> None:
    _cluster(kubeapi)
    if case == "selects-other-pods":
        _service(kubeapi, "web", app="db")
    elif case == "other-namespace":
        _service(kubeapi, "web", "team-b")
    elif case == "not-governing":  # selects web's pods, but spec.serviceName names another Service
        _service(kubeapi, "web-public")
    assert reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass().converged
    for secret in ("web-tls", "db-tls"):  # db's serviceName is db, which does not exist: no wildcard either
        assert not [name for name in _sans(kubeapi, secret) if name.startswith("*")]
    with pytest.raises(ssl.SSLCertVerificationError):
        _peer_dials(kubeapi, "web-2.web.team-a.svc.cluster.local")


def test_a_governing_service_added_later_reissues_the_certificate_with_the_peer_names(kubeapi: Emulator) -> None:
    _cluster(kubeapi)
    rec = reconciler(kubeapi, Clock(datetime.now(UTC)))
    assert rec.run_pass().converged
    assert _sans(kubeapi, "web-tls") == OWN
    _service(kubeapi, "web")
    assert rec.run_pass().reasons["renewed:sans-changed"] == 1
    assert _sans(kubeapi, "web-tls") == sorted(PEERS + OWN)
    assert rec.run_pass().write_count == 0  # the wildcard names are sealed and kept like any others


# Pod-certificate mode: each pod its own name.

@pytest.fixture
def native() -> Iterator[tuple[Emulator, Clock]]:
    clock = Clock(datetime.now(UTC))  # the ssl module checks validity against the real clock
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, NS)
        yield emu, clock


def _statefulset_pod(emu: Emulator, ordinal: int, *, hostname: str | None = None) -> dict[str, Any]:
    """A pod as the StatefulSet controller makes it: `web-<n>`, host name its own name, subdomain the
    governing Service."""
    name = f"web-{ordinal}"
    return emu.add({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"app": "web", "tls-injector.io/inject": "true"},
                     "annotations": {"tls-injector.io/mode": "pod-certificate"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                          "uid": "sts-uid", "controller": True}]},
        "spec": {"nodeName": kubelet.NODE, "serviceAccountName": "default", "hostname": hostname or name,
                 "subdomain": "web", "containers": [{"name": "app", "image": "example/app:1"}]},
    })


def _served(emu: Emulator, req: kubelet.Request) -> Party:
    key_pem = req.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return Party(kubelet.status(emu, req)["certificateChain"].encode(), key_pem)


def test_each_statefulset_pod_certificate_names_that_pod_exactly(native: tuple[Emulator, Clock]) -> None:
    emu, clock = native
    two = kubelet.request(emu, _statefulset_pod(emu, 2))
    odd = kubelet.request(emu, _statefulset_pod(emu, 3, hostname="web-0"))  # claims another pod's host name
    assert reconciler(emu, clock).run_pass().converged
    chain = load_certificates(kubelet.status(emu, two)["certificateChain"].encode())
    assert sorted(dns_sans(chain[0])) == sorted(
        ["web-2.web.team-a.svc", "web-2.web.team-a.svc.cluster.local", *OWN])
    bundle = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in kubelet.bundle_anchors(emu))
    assert handshake(_served(emu, two), bundle_pem=bundle, hostname="web-2.web.team-a.svc.cluster.local")
    for hostname in ("web-1.web.team-a.svc.cluster.local", "web-2.db.team-a.svc.cluster.local"):
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(_served(emu, two), bundle_pem=bundle, hostname=hostname)
    assert sorted(dns_sans(load_certificates(kubelet.status(emu, odd)["certificateChain"].encode())[0])) == OWN
