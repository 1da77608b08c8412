"""Client certificates through the whole chain (docs/mtls.md): pods with `tls-injector.io/client-certificate:
"true"` go through the real /mutate over HTTPS and are stored in the API emulator as the apiserver stores
them; one reconcile pass issues their client Secrets from a client CA of their own; the kubelet
(tests/support/kubelet.py) resolves every volume; then real TLS 1.3 handshakes on loopback with the files
each container sees: a server with its serving certificate that requires client certificates and verifies
them with the mounted client bundle, a client with the mounted client certificate."""

from __future__ import annotations

import copy
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.kubeapi import Emulator
from tests.reconcile import cluster
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tests.reconcile.test_chain_emulator import NS, admitted
from tests.support.kube_schema import schema_errors
from tests.support.kubelet import NODE, File, Kubelet
from tests.support.server import running_server
from tests.support.workloads import INJECT, Obj, Shape, build
from tls_injector.injection import InjectionOptions, client_secret_name_for, make_mutate_handler
from tls_injector.kube import DEPLOYMENTS, PODS, REPLICA_SETS, SECRETS, KubeApi
from tls_injector.names import CERT_MOUNT_PATH, CLIENT_MOUNT_PATH, TRUST_MOUNT_PATH
from tls_injector.pki import (
    fingerprint,
    issue_client,
    issue_leaf,
    load_certificates,
    make_root,
    to_pem,
    uri_sans,
    verify_client,
)
from tls_injector.pki.keys import key_to_pem

CLIENT = "tls-injector.io/client-certificate"
OPTED_IN = {INJECT: "true"}
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with running_server(tmp_path_factory.mktemp("srv"), mutate=make_mutate_handler(InjectionOptions())) as server, \
            server.client() as client:
        yield client


def run(emu: Emulator, client: httpx.Client, shape: Shape, *, service_account: str = "") -> Obj:
    """A Deployment (its ReplicaSet and one pod) created through the official client, the pod through
    /mutate; returns the stored pod, bound to the node."""
    api = KubeApi(emu.api_client())
    if service_account:  # the ServiceAccount admission plugin refuses a pod whose account does not exist
        cluster.service_account(emu, service_account, NS)

    def create(obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        if service_account:
            obj["spec"]["template"]["spec"]["serviceAccountName"] = service_account
        return api.create({"Deployment": DEPLOYMENTS, "ReplicaSet": REPLICA_SETS}[obj["kind"]], obj, namespace=NS)

    pod = admitted(client, build(shape, NS, create=create, admit_job=lambda job: job))
    assert schema_errors(pod) == []
    pod["spec"]["nodeName"] = NODE
    return api.create(PODS, pod, namespace=NS)


@dataclass
class Mounted:
    """What one container sees, written out as the files a TLS library loads."""

    files: dict[str, File]
    root: Path

    def path(self, name: str) -> str:
        target = self.root / name.strip("/").replace("/", "_")
        target.write_bytes(self.files[name].content)
        return str(target)

    def text(self, name: str) -> str:
        return self.files[name].content.decode()


def mounted(emu: Emulator, pod: Obj, root: Path) -> Mounted:
    root.mkdir(parents=True, exist_ok=True)
    return Mounted(Kubelet(emu).container_files(pod, "app"), root)


def server_context(cert: str, key: str, *, client_cas: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=client_cas)
    return context


def client_context(cert: str, key: str, *, server_cas: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cadata=server_cas)
    context.load_cert_chain(cert, key)
    return context


@dataclass
class Outcome:
    server: str  # "accepted <peer URI SANs>" or the server's error
    client: str  # "ok" when the server's reply arrived, else the client's error
    version: str = ""

    @property
    def accepted(self) -> bool:
        return self.server.startswith("accepted") and self.client == "ok"


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, *, server_name: str) -> Outcome:
    """One connection on loopback: the server requires and verifies a client certificate, then says "ok"."""
    result: dict[str, str] = {}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                conn.settimeout(TIMEOUT)
                with server.wrap_socket(conn, server_side=True) as tls:
                    peer = tls.getpeercert() or {}
                    uris = [v for k, v in peer.get("subjectAltName", ()) if k == "URI"]
                    result["server"] = f"accepted {uris}"
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as e:
                result["server"] = f"{type(e).__name__}: {e}"

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=TIMEOUT) as raw, \
                    client.wrap_socket(raw, server_hostname=server_name) as tls:
                version = tls.version() or ""
                reply = tls.recv(2)
                outcome = "ok" if reply == b"ok" else f"no reply ({reply!r})"
        except (ssl.SSLError, OSError) as e:
            outcome, version = f"{type(e).__name__}: {e}", ""
        thread.join(TIMEOUT)
    return Outcome(result.get("server", "no result"), outcome, version)


def eku(pem: bytes) -> set[x509.ObjectIdentifier]:
    cert = load_certificates(pem)[0]
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_a_client_certificate_is_issued_mounted_and_logs_in_only_where_it_should(
    kubeapi: Emulator, webhook: httpx.Client, tmp_path: Path
) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    clock = Clock(datetime.now(UTC))  # the handshakes check validity against the real clock
    server_pod = run(kubeapi, webhook, Shape("Deployment", "api", OPTED_IN))
    caller_pod = run(kubeapi, webhook, Shape("Deployment", "caller", OPTED_IN, {CLIENT: "true"}),
                     service_account="caller-sa")
    volumes = {v["name"]: v for v in caller_pod["spec"]["volumes"]}
    assert volumes["tls-injector-client"] == {"name": "tls-injector-client",
                                              "secret": {"secretName": "caller-client-tls"}}
    assert {"name": "tls-injector-client", "mountPath": CLIENT_MOUNT_PATH, "readOnly": True} in \
        caller_pod["spec"]["containers"][0]["volumeMounts"]
    assert "tls-injector-client" not in {v["name"] for v in server_pod["spec"]["volumes"]}

    report = reconciler(kubeapi, clock).run_pass()
    assert report.converged, report
    assert reconciler(kubeapi, clock).run_pass().write_count == 0, "a converged cluster costs no write"

    # Two CA Secrets, two distinct CAs; the client Secret holds a clientAuth-only leaf from the client CA
    # with the workload's SPIFFE ID; the serving Secrets hold serverAuth-only leaves.
    serving_ca, client_ca = (data(kubeapi.get("secrets", name, OWN_NS))
                             for name in ("tls-injector-ca", "tls-injector-client-ca"))
    serving_fps = {k.split(".")[0] for k in serving_ca if k.endswith(".crt")}
    client_fps = {k.split(".")[0] for k in client_ca if k.endswith(".crt")}
    assert len(serving_fps) == len(client_fps) == 1
    assert not serving_fps & client_fps
    issued = data(kubeapi.get("secrets", "caller-client-tls", NS))
    [leaf, issuer] = load_certificates(issued["tls.crt"]) + load_certificates(client_ca[f"{min(client_fps)}.crt"])
    assert fingerprint(issuer) in client_fps
    assert leaf.issuer == issuer.subject
    assert uri_sans(leaf) == ["spiffe://cluster.local/ns/shop/sa/caller-sa"]
    assert eku(issued["tls.crt"]) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    for serving in ("api-tls", "caller-tls"):
        assert eku(data(kubeapi.get("secrets", serving, NS))["tls.crt"]) == {ExtendedKeyUsageOID.SERVER_AUTH}

    # What each container sees, as the kubelet fills its volumes in.
    api, caller = mounted(kubeapi, server_pod, tmp_path / "api"), mounted(kubeapi, caller_pod, tmp_path / "caller")
    assert f"{CLIENT_MOUNT_PATH}/tls.crt" not in api.files
    for name in ("tls.crt", "tls.key", "ca.crt"):
        assert f"{CLIENT_MOUNT_PATH}/{name}" in caller.files
    client_bundle = api.text(f"{TRUST_MOUNT_PATH}/client-ca-bundle.crt")
    assert {fingerprint(c) for c in load_certificates(client_bundle.encode())} == client_fps
    assert api.text(f"{TRUST_MOUNT_PATH}/ca-bundle.crt") != client_bundle

    server = server_context(api.path(f"{CERT_MOUNT_PATH}/tls.crt"), api.path(f"{CERT_MOUNT_PATH}/tls.key"),
                            client_cas=client_bundle)
    trusting_both = server_context(api.path(f"{CERT_MOUNT_PATH}/tls.crt"), api.path(f"{CERT_MOUNT_PATH}/tls.key"),
                                   client_cas=client_bundle + api.text(f"{TRUST_MOUNT_PATH}/ca-bundle.crt"))
    server_cas = caller.text(f"{CLIENT_MOUNT_PATH}/ca.crt")
    as_client = client_context(caller.path(f"{CLIENT_MOUNT_PATH}/tls.crt"), caller.path(f"{CLIENT_MOUNT_PATH}/tls.key"),
                               server_cas=server_cas)
    host = f"api.{NS}.svc"

    # The caller's serving certificate (serverAuth only, from the serving CA) presented as a client one, to
    # a server trusting only the client CAs, and to one that trusts the serving CAs too (then only the
    # missing clientAuth usage stops it); a client certificate with the very same SPIFFE ID from another
    # client CA; the client certificate presented by a server (a client key cannot serve).
    serving_as_client = client_context(caller.path(f"{CERT_MOUNT_PATH}/tls.crt"),
                                       caller.path(f"{CERT_MOUNT_PATH}/tls.key"), server_cas=server_cas)
    other = issue_client(make_root("client", now=clock.now), uris=[uri_sans(leaf)[0]], now=clock.now)
    foreign = client_context(str(_write(tmp_path / "other.crt", other.chain_pem)),
                             str(_write(tmp_path / "other.key", other.key_pem)), server_cas=server_cas)
    client_as_server = server_context(caller.path(f"{CLIENT_MOUNT_PATH}/tls.crt"),
                                      caller.path(f"{CLIENT_MOUNT_PATH}/tls.key"), client_cas=client_bundle)
    matrix = {
        "issued client certificate": handshake(server, as_client, server_name=host),
        "serving certificate as client": handshake(server, serving_as_client, server_name=host),
        "serving certificate as client, server trusting both CAs": handshake(trusting_both, serving_as_client,
                                                                            server_name=host),
        "client certificate of another CA": handshake(server, foreign, server_name=host),
        "client certificate as server": handshake(client_as_server, as_client, server_name=host),
    }
    assert {case: outcome.accepted for case, outcome in matrix.items()} == {
        "issued client certificate": True,
        "serving certificate as client": False,
        "serving certificate as client, server trusting both CAs": False,
        "client certificate of another CA": False,
        "client certificate as server": False,
    }, matrix
    accepted = matrix["issued client certificate"]
    assert accepted.version == "TLSv1.3"
    assert accepted.server == "accepted ['spiffe://cluster.local/ns/shop/sa/caller-sa']"
    refusals = {case: outcome.client if case == "client certificate as server" else outcome.server
                for case, outcome in matrix.items() if not outcome.accepted}
    assert all("certificate verify failed" in why for why in refusals.values()), refusals
    assert "unsuitable certificate purpose" in refusals["serving certificate as client, server trusting both CAs"]


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def test_the_client_secret_follows_the_workload_and_its_identity(kubeapi: Emulator, webhook: httpx.Client) -> None:
    """A second pass keeps it; a new service account re-issues it; dropping the annotation deletes it (and
    the client bundle stays in the trust bundle only while some workload asks for client certificates)."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    clock = Clock()
    run(kubeapi, webhook, Shape("Deployment", "caller", OPTED_IN, {CLIENT: "true"}))
    assert reconciler(kubeapi, clock).run_pass().converged
    first = data(kubeapi.get("secrets", "caller-client-tls", NS))["tls.crt"]
    assert uri_sans(load_certificates(first)[0]) == ["spiffe://cluster.local/ns/shop/sa/default"]

    cluster.service_account(kubeapi, "renamed", NS)
    for kind in ("deployments", "replicasets"):
        [obj] = kubeapi.objects(kind, NS)
        obj["spec"]["template"]["spec"]["serviceAccountName"] = "renamed"
        KubeApi(kubeapi.api_client()).replace(DEPLOYMENTS if kind == "deployments" else REPLICA_SETS, obj)
    report = reconciler(kubeapi, clock, trust_domain="example.org").run_pass()
    assert report.reasons["renewed:sans-changed"] == 1, report
    second = data(kubeapi.get("secrets", "caller-client-tls", NS))["tls.crt"]
    assert uri_sans(load_certificates(second)[0]) == ["spiffe://example.org/ns/shop/sa/renamed"]

    for kind in ("deployments", "replicasets"):
        [obj] = kubeapi.objects(kind, NS)
        del obj["spec"]["template"]["metadata"]["annotations"][CLIENT]
        KubeApi(kubeapi.api_client()).replace(DEPLOYMENTS if kind == "deployments" else REPLICA_SETS, obj)
    assert reconciler(kubeapi, clock).run_pass().converged
    assert kubeapi.get("secrets", "caller-client-tls", NS) is None
    bundle = kubeapi.get("configmaps", "tls-injector-trust-bundle", NS)
    assert bundle is not None
    assert "client-ca-bundle.crt" not in bundle["data"]
    assert "ca-bundle.crt" in bundle["data"]


def test_users_of_one_secret_with_different_service_accounts_get_no_client_certificate(
    kubeapi: Emulator, webhook: httpx.Client
) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    shared = {CLIENT: "true", "tls-injector.io/secret-name": "shared-tls"}
    clock = Clock()
    run(kubeapi, webhook, Shape("Deployment", "one", OPTED_IN, shared), service_account="a")
    assert reconciler(kubeapi, clock).run_pass().converged
    assert kubeapi.get("secrets", "shared-client-tls", NS) is not None
    run(kubeapi, webhook, Shape("Deployment", "two", OPTED_IN, shared), service_account="b")
    report = reconciler(kubeapi, clock).run_pass()
    assert kubeapi.get("secrets", "shared-client-tls", NS) is None, "one certificate cannot name two identities"
    assert any("different service accounts" in r for r in report.clients_refused), report.clients_refused
    assert kubeapi.get("secrets", "shared-tls", NS) is not None, "the serving certificate is issued all the same"


def test_the_client_secret_name_is_derived_by_the_one_naming_function() -> None:
    assert client_secret_name_for("web-tls") == "web-client-tls"
    assert client_secret_name_for("certs") == "certs-client-tls"
    long = client_secret_name_for(("a" * 249) + "-tls")
    assert len(long) == 253
    assert long.endswith("-client-tls")
    assert long != client_secret_name_for(("a" * 248) + "b-tls")


def test_a_serving_leaf_carries_server_auth_only_and_a_client_leaf_client_auth_only() -> None:
    clock = Clock()
    root = make_root("serving", now=clock.now)
    serving = issue_leaf(issuer=root, dns_names=["web.shop.svc"], now=clock.now)
    assert eku(to_pem([serving.cert])) == {ExtendedKeyUsageOID.SERVER_AUTH}
    client = issue_client(root, uris=["spiffe://cluster.local/ns/shop/sa/default"], now=clock.now)
    assert eku(to_pem([client.cert])) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert key_to_pem(client.key) == client.key_pem


def client_ca_states(emu: Emulator, secret: str = "tls-injector-client-ca") -> dict[str, str]:
    stored = data(emu.get("secrets", secret, OWN_NS))
    return {k.split(".")[0][:8]: k.split(".")[1] for k in stored if not k.endswith((".crt", ".key"))}


def test_the_client_ca_rotates_on_its_own_and_every_client_leaf_stays_trusted_by_every_bundle(
    kubeapi: Emulator,
) -> None:
    """A forced replacement of the client CA walks it through the trust state machine; after every pass
    each client leaf verifies, as an mTLS server checks it, against the client bundle of every namespace
    (a client anywhere may call a server anywhere), and the serving CA does not move."""
    namespace(kubeapi, OWN_NS)
    clients = []
    for ns in ("a", "b"):
        namespace(kubeapi, ns)
        deployment(kubeapi, "caller", ns, annotations={CLIENT: "true"})
        clients.append((ns, "caller-client-tls"))
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    serving = client_ca_states(kubeapi, "tls-injector-ca")
    (old,) = client_ca_states(kubeapi)
    api = KubeApi(kubeapi.api_client())
    ca = api.get(SECRETS, "tls-injector-client-ca", namespace=OWN_NS)
    ca["metadata"]["annotations"] = {"tls-injector.io/force-replace": "1"}
    api.replace(SECRETS, ca)
    history = [client_ca_states(kubeapi)]
    for _ in range(20):
        clock.advance(timedelta(minutes=6))
        report = reconciler(kubeapi, clock).run_pass()
        assert report.converged, report
        assert client_ca_states(kubeapi, "tls-injector-ca") == serving, "the serving CA does not move"
        bundles = [load_certificates(kubeapi.get("configmaps", "tls-injector-trust-bundle", ns)["data"]
                                     ["client-ca-bundle.crt"].encode()) for ns in ("a", "b")]
        for ns, name in clients:
            chain = load_certificates(data(kubeapi.get("secrets", name, ns))["tls.crt"])
            for bundle in bundles:
                verify_client(chain[0], chain[1:], trusted=bundle, now=clock.now)
        if history[-1] != client_ca_states(kubeapi):
            history.append(client_ca_states(kubeapi))
        if report.write_count == 0 and old not in client_ca_states(kubeapi):
            break
    else:
        raise AssertionError(f"the rotation did not finish: {history}")
    (new,) = client_ca_states(kubeapi)
    assert [h.get(old, "removed") for h in history] == [
        "trusted-used", "trusted-used", "trusted-used", "phase-out", "zombie", "removed"]
    assert [h.get(new, "-") for h in history] == [
        "-", "untrusted", "trusted-unused", "trusted-used", "trusted-used", "trusted-used"]
