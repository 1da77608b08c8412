"""One chain of trust across clusters (docs/multicluster.md), through the real CLI processes: three API
server emulators at once (a hub and two members), `python -m tls_injector reconcile --once --hub` against the hub,
`python -m tls_injector reconcile --once` against each member; the members are registered in the hub as Secrets
holding a kubeconfig for their emulator. Pods go through the real /mutate; the kubelet
(tests/support/kubelet.py) resolves their volumes; real TLS 1.3 handshakes with client auth then run
between pods of different members with nothing but the files mounted in them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, data, namespace
from tests.reconcile.test_mtls_chain import (
    CLIENT,
    NS,
    OPTED_IN,
    Mounted,
    client_context,
    handshake,
    mounted,
    run,
    server_context,
    webhook,
)
from tests.support.workloads import Shape
from tls_injector.kube import KubeApi
from tls_injector.names import CERT_MOUNT_PATH, CLIENT_MOUNT_PATH, MEMBER_LABEL, TRUST_MOUNT_PATH
from tls_injector.pki import (
    fingerprint,
    issue_client,
    issue_leaf,
    load_cert_key,
    load_certificates,
    make_ca,
    make_root,
    uri_sans,
)
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

ROOT = Path(__file__).resolve().parents[2]
__all__ = ["webhook"]  # the /mutate fixture, shared with test_mtls_chain
INTERMEDIATES = ("tls-injector-intermediate-ca", "tls-injector-client-intermediate-ca")
MEMBERS = ("east", "west")
# Which handshakes of `handshakes` are accepted: callers of both members to the other member's server; not
# a client certificate from a CA outside the federation, nor a serving certificate presented as a client one.
FEDERATION_MATRIX = {
    "west caller -> east api": True,
    "east caller -> west api": True,
    "outsider client certificate -> east api": False,
    "west serving certificate as client -> east api": False,
    "west serving certificate as client -> east api trusting both roots": False,
}


def cli(url: str, *extra: str) -> subprocess.Popen[bytes]:
    """`python -m tls_injector reconcile --once` against one emulator (no webhook self-care, no pod certificates:
    neither is what these tests look at)."""
    argv = [sys.executable, "-m", "tls_injector", "reconcile", "--once", "--server", url, "--namespace", OWN_NS,
            "--cluster-domain", "cluster.local", "--webhook-configurations", "", "--pod-certificates", "off", *extra]
    env = {**os.environ, "KUBECONFIG": os.devnull}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(*procs: subprocess.Popen[bytes]) -> list[tuple[int, str, str]]:
    """Each process's exit status, stdout, and stderr (the JSON log), waited for together."""
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert b"Traceback" not in err, err.decode()
        results.append((proc.returncode, out.decode(), err.decode()))
    return results


def doctor(url: str, *extra: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "tls_injector", "doctor", "--server", url, "--namespace", OWN_NS, "--cluster-domain",
            "cluster.local", "--webhook-configurations", "", "-o", "json", *extra]
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "KUBECONFIG": os.devnull}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def register(hub: Emulator, name: str, kubeconfig: dict[str, Any] | bytes) -> None:
    raw = kubeconfig if isinstance(kubeconfig, bytes) else json.dumps(kubeconfig).encode()
    hub.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": f"member-{name}", "namespace": OWN_NS, "labels": {MEMBER_LABEL: name}},
             "data": {"kubeconfig": base64.b64encode(raw).decode()}})


class Federation:
    def __init__(self, hub: Emulator, members: dict[str, Emulator], shift: list[timedelta]) -> None:
        self.hub, self.members, self.shift = hub, members, shift

    def roots(self, secret: str) -> list[x509.Certificate]:
        stored = data(self.hub.get("secrets", secret, OWN_NS))
        return [load_certificates(v)[0] for k, v in sorted(stored.items()) if k.endswith(".crt")]

    def root_keys(self) -> dict[str, bytes]:
        """Every private key in the hub's CA Secrets, by fingerprint of its public key."""
        keys = {}
        for secret in ("tls-injector-ca", "tls-injector-client-ca"):
            for k, v in data(self.hub.get("secrets", secret, OWN_NS)).items():
                if k.endswith(".key"):
                    keys.update(private_keys(v))
        return keys

    def pass_hub(self) -> tuple[int, str, str]:
        return finished(cli(self.hub.url, "--hub"))[0]

    def pass_members(self) -> dict[str, tuple[int, str, str]]:
        """Each member's pass, at once; each member names its own SPIFFE trust domain (<member>.mesh)."""
        procs = {name: cli(emu.url, "--trust-domain", f"{name}.mesh") for name, emu in self.members.items()}
        return dict(zip(procs, finished(*procs.values()), strict=True))


def private_keys(pem: bytes) -> dict[str, bytes]:
    """Every PEM private key found in `pem`, by the SHA-256 of its public key (DER SubjectPublicKeyInfo)."""
    found = {}
    for block in pem.split(b"-----BEGIN ")[1:]:
        if b"PRIVATE KEY-----" not in block.split(b"\n", 1)[0]:
            continue
        text = b"-----BEGIN " + block.split(b"-----END", 1)[0] + b"-----END" + block.split(b"-----END", 1)[1].split(
            b"\n", 1)[0] + b"\n"
        key = serialization.load_pem_private_key(text, password=None)
        public = key.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
        found[_sha(public)] = text
    return found


def _sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def public_fp(cert: x509.Certificate) -> str:
    return _sha(cert.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo))


@pytest.fixture
def federation() -> Iterator[Federation]:
    """A hub and two members; their API servers' clocks run `shift` (a one-item list) ahead of real time,
    for tests that move every cluster's time at once."""
    shift = [timedelta(0)]

    def clock() -> datetime:
        return datetime.now(UTC) + shift[0]

    with ExitStack() as stack:
        hub = stack.enter_context(running_emulator(seed=1, now=clock))
        members = {name: stack.enter_context(running_emulator(seed=2 + i, now=clock)) for i, name in enumerate(MEMBERS)}
        for emu in (hub, *members.values()):
            namespace(emu, OWN_NS)
            namespace(emu, NS)
        for name, emu in members.items():
            register(hub, name, emu.kubeconfig())
        yield Federation(hub, members, shift)


def chain_lines(pem: bytes) -> list[str]:
    return [f"subject={c.subject.rfc4514_string()}  issuer={c.issuer.rfc4514_string()}" for c in load_certificates(pem)]


def test_a_hub_issues_each_member_intermediates_and_pods_of_two_members_trust_each_other(
    federation: Federation, webhook: httpx.Client, tmp_path: Path
) -> None:
    hub, east, west = federation.hub, federation.members["east"], federation.members["west"]
    pods = {(member, name): run(emu, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}),
                                service_account=f"{name}-sa")
            for member, emu in (("east", east), ("west", west)) for name in ("api", "caller")}

    code, out, err = federation.pass_hub()
    assert code == 0, (out, err)
    assert "converged" in out
    serving_roots, client_roots = federation.roots("tls-injector-ca"), federation.roots("tls-injector-client-ca")
    assert len(serving_roots) == len(client_roots) == 1
    serving_root, client_root = serving_roots[0], client_roots[0]
    for name, emu in federation.members.items():
        for secret, root in zip(INTERMEDIATES, (serving_root, client_root), strict=True):
            stored = emu.get("secrets", secret, OWN_NS)
            assert stored is not None, f"{name} has no {secret}"
            assert stored["type"] == "kubernetes.io/tls"
            inter = load_certificates(data(stored)["tls.crt"])
            assert len(inter) == 1
            assert inter[0].issuer == root.subject
            inter[0].verify_directly_issued_by(root)
            assert inter[0].extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
            assert load_certificates(data(stored)["ca.crt"]) == [root]
            assert stored["metadata"]["annotations"]["tls-injector.io/issuing-root"] == fingerprint(root)
    assert finished(cli(hub.url, "--hub"))[0][1].startswith("converged: 0 writes"), "a converged hub writes nothing"

    passes = federation.pass_members()
    assert all(code == 0 for code, _, _ in passes.values()), passes

    # Leaf Secrets carry leaf + intermediate; ca.crt and every bundle carry the roots only.
    for name, emu in federation.members.items():
        serving_inter = load_certificates(data(emu.get("secrets", INTERMEDIATES[0], OWN_NS))["tls.crt"])[0]
        client_inter = load_certificates(data(emu.get("secrets", INTERMEDIATES[1], OWN_NS))["tls.crt"])[0]
        for workload in ("api", "caller"):
            leaf = data(emu.get("secrets", f"{workload}-tls", NS))
            assert load_certificates(leaf["tls.crt"])[1:] == [serving_inter], name
            assert load_certificates(leaf["ca.crt"]) == [serving_root], name
            client = data(emu.get("secrets", f"{workload}-client-tls", NS))
            assert load_certificates(client["tls.crt"])[1:] == [client_inter], name
            assert uri_sans(load_certificates(client["tls.crt"])[0]) == [
                f"spiffe://{name}.mesh/ns/{NS}/sa/{workload}-sa"]
        bundle = emu.get("configmaps", "tls-injector-trust-bundle", NS)["data"]
        assert load_certificates(bundle["ca-bundle.crt"].encode()) == [serving_root]
        assert load_certificates(bundle["client-ca-bundle.crt"].encode()) == [client_root]
        assert fingerprint(serving_root) != fingerprint(client_root)

    # No root key in any member: every private key in every Secret of every member is compared with the
    # roots' public keys. The same search finds the roots' keys in the hub and the intermediates' in the
    # members, so it is a search that can find what it looks for.
    roots_public = {public_fp(serving_root), public_fp(client_root)}
    assert set(federation.root_keys()) == roots_public
    for name, emu in federation.members.items():
        found: dict[str, bytes] = {}
        for secret in emu.objects("secrets"):
            for value in data(secret).values():
                found.update(private_keys(value))
        intermediates = {public_fp(load_certificates(data(emu.get("secrets", s, OWN_NS))["tls.crt"])[0])
                         for s in INTERMEDIATES}
        assert intermediates <= set(found), name
        assert not roots_public & set(found), f"a root key is in member {name}"

    # Cross-cluster: with only what each container has mounted.
    files = {key: mounted(federation.members[key[0]], pod, tmp_path / "-".join(key)) for key, pod in pods.items()}
    matrix = handshakes(files, tmp_path)
    print("\nissued chain (west caller's client certificate):",
          *chain_lines(files["west", "caller"].files[f"{CLIENT_MOUNT_PATH}/tls.crt"].content),
          f"root: {client_root.subject.rfc4514_string()}", sep="\n  ")
    print("issued chain (east api's serving certificate):",
          *chain_lines(files["east", "api"].files[f"{CERT_MOUNT_PATH}/tls.crt"].content),
          f"root: {serving_root.subject.rfc4514_string()}", sep="\n  ")
    print("handshake matrix:", *(f"{case}: {'accepted ' + o.version if o.accepted else 'refused'} ({o.server}; "
                                 f"client: {o.client})" for case, o in matrix.items()), sep="\n  ")
    assert {case: o.accepted for case, o in matrix.items()} == FEDERATION_MATRIX, matrix
    for case in ("west caller -> east api", "east caller -> west api"):
        assert matrix[case].version == "TLSv1.3"
    assert matrix["west caller -> east api"].server == f"accepted ['spiffe://west.mesh/ns/{NS}/sa/caller-sa']"
    assert matrix["east caller -> west api"].server == f"accepted ['spiffe://east.mesh/ns/{NS}/sa/caller-sa']"
    refused = [o.server for o in matrix.values() if not o.accepted]
    assert all("certificate verify failed" in why for why in refused), refused
    assert "unsuitable certificate purpose" in matrix[
        "west serving certificate as client -> east api trusting both roots"].server

    # A second round writes nothing anywhere.
    assert federation.pass_hub()[1].startswith("converged: 0 writes")
    assert all(out.startswith("converged: 0 writes") for _, out, _ in federation.pass_members().values())


def handshakes(files: dict[tuple[str, str], Mounted], tmp_path: Path) -> dict[str, Any]:
    def server(member: str, *, also_serving_roots: bool = False) -> Any:
        api = files[member, "api"]
        cas = api.text(f"{TRUST_MOUNT_PATH}/client-ca-bundle.crt")
        if also_serving_roots:
            cas += api.text(f"{TRUST_MOUNT_PATH}/ca-bundle.crt")
        return server_context(api.path(f"{CERT_MOUNT_PATH}/tls.crt"), api.path(f"{CERT_MOUNT_PATH}/tls.key"),
                              client_cas=cas)

    def client(member: str, mount: str = CLIENT_MOUNT_PATH) -> Any:
        caller = files[member, "caller"]
        return client_context(caller.path(f"{mount}/tls.crt"), caller.path(f"{mount}/tls.key"),
                              server_cas=caller.text(f"{CLIENT_MOUNT_PATH}/ca.crt"))

    now = datetime.now(UTC)
    outsider = issue_client(make_root("client", now=now), uris=[f"spiffe://west.mesh/ns/{NS}/sa/caller-sa"],
                            now=now)
    (tmp_path / "outsider.crt").write_bytes(outsider.chain_pem)
    (tmp_path / "outsider.key").write_bytes(outsider.key_pem)
    foreign = client_context(str(tmp_path / "outsider.crt"), str(tmp_path / "outsider.key"),
                             server_cas=files["west", "caller"].text(f"{CLIENT_MOUNT_PATH}/ca.crt"))
    east_host, west_host = f"api.{NS}.svc", f"api.{NS}.svc"
    return {
        "west caller -> east api": handshake(server("east"), client("west"), server_name=east_host),
        "east caller -> west api": handshake(server("west"), client("east"), server_name=west_host),
        "outsider client certificate -> east api": handshake(server("east"), foreign, server_name=east_host),
        "west serving certificate as client -> east api": handshake(
            server("east"), client("west", CERT_MOUNT_PATH), server_name=east_host),
        "west serving certificate as client -> east api trusting both roots": handshake(
            server("east", also_serving_roots=True), client("west", CERT_MOUNT_PATH), server_name=east_host),
    }


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def foreign_intermediate(now: datetime) -> dict[str, Any]:
    """A kubernetes.io/tls Secret of the intermediate's name, from a root that is not the hub's."""
    other = make_ca(common_name="someone else's root", now=now, path_length=1)
    inter = make_ca(common_name="someone else's intermediate", now=now, issuer=other, path_length=0)
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": INTERMEDIATES[0], "namespace": OWN_NS},
            "data": {k: base64.b64encode(v).decode() for k, v in
                     {"tls.crt": inter.cert_pem, "tls.key": inter.key_pem, "ca.crt": other.cert_pem}.items()}}


def test_bad_members_are_each_refused_with_a_reason_and_the_good_one_is_served(federation: Federation) -> None:
    """One hub pass over two good members and one of each kind of bad input: the good ones get their
    intermediates; each bad one gets nothing (never part of a chain) and its reason in the log, an Event on
    its Secret, the metric, the status API and the exit status; nothing crashes."""
    hub, east = federation.hub, federation.members["east"]
    with ExitStack() as stack:
        no_namespace = stack.enter_context(running_emulator(seed=7))
        skewed = stack.enter_context(running_emulator(seed=8, now=lambda: datetime.now(UTC) + timedelta(minutes=10)))
        # A Secret of an intermediate's name that the hub did not write is refused by the member's
        # tls-injector.hub-reach policy when the hub writes over it (the hub cannot read it): the emulator runs
        # no admission policy, so that case is proven on a real API server (tests/cluster/test_hub_least_privilege.py).
        namespace(skewed, OWN_NS)
        gone = {**east.kubeconfig(), "clusters": [{"name": "kubeapi-emulator",
                                                   "cluster": {"server": f"http://127.0.0.1:{closed_port()}"}}]}
        plugin = {**east.kubeconfig(), "users": [{"name": "kubeapi-emulator", "user": {
            "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "id"]}}}]}
        # An https server with no certificate-authority-data: no fallback to the system's public CAs, which
        # would trust any server with a public certificate for that name with the hub's bearer token.
        noca = {**east.kubeconfig(), "clusters": [{"name": "kubeapi-emulator",
                                                   "cluster": {"server": f"https://127.0.0.1:{closed_port()}"}}]}
        register(hub, "broken", b"{{{ this is not a kubeconfig")
        for name, config in (("gone", gone), ("plugin", plugin), ("nons", no_namespace.kubeconfig()),
                             ("skewed", skewed.kubeconfig()), ("noca", noca)):
            register(hub, name, config)
        hub.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member-bad", "namespace": OWN_NS,
                                                                  "labels": {MEMBER_LABEL: "Not_A_Name"}}})

        code, out, err = federation.pass_hub()
        assert code == 1, (out, err)
        procs = (doctor(hub.url, "--hub"), doctor(east.url, "--trust-domain", "east.mesh"))
        doctors = dict(zip(("hub", "east"), finished(*procs), strict=True))
        expected = {
            "broken": "its kubeconfig is not usable: the kubeconfig is not YAML",
            "gone": "unreachable",
            "plugin": "uses 'exec', which a member kubeconfig may not",
            "nons": f"namespace {OWN_NS} does not exist there",
            "skewed": "s ahead of the hub's (more than 300s",
            "noca": "has no certificate-authority-data",
            "secret/member-bad": "is not a DNS-1123 label",
        }
        logged = {line["member"]: line["reason"] for line in map(json.loads, err.splitlines())
                  if line.get("msg") == "member not ready"}
        assert set(logged) == set(expected), logged
        for member, words in expected.items():
            assert words in logged[member], (member, logged[member])
        skew = int(logged["skewed"].split("clock is ")[1].split("s ")[0])
        assert 595 <= skew <= 600, "10 minutes, measured on the Date header (1 s resolution) of a request"
        events = {e["involvedObject"]["name"]: e for e in hub.objects("events", OWN_NS)
                  if e["reason"] == "MemberNotReady"}
        assert set(events) == {f"member-{m}" for m in expected if not m.startswith("secret/")}
        assert all(e["type"] == "Warning" and expected[n.removeprefix("member-")] in e["message"]
                   for n, e in events.items())

        # The good member is served; the bad ones got nothing.
        assert all(east.get("secrets", s, OWN_NS) is not None for s in INTERMEDIATES)
        for emu in (no_namespace, skewed):
            assert emu.objects("secrets") == []
        for emu in (east,):
            for secret in INTERMEDIATES:
                stored = data(emu.get("secrets", secret, OWN_NS))
                load_cert_key(stored["tls.crt"], stored["tls.key"])  # chain and key belong together

        # doctor --hub says the same, read-only; a member's doctor says its intermediates are usable.
        found = {c["title"]: c for c in json.loads(doctors["hub"][1])["checks"] if c["category"] == "multi-cluster"}
        assert found["member east holds current intermediates"]["status"] == "ok"
        assert len(found["member east holds current intermediates"]["details"]) == 2
        for member, words in expected.items():
            check = found[f"member {member} holds current intermediates"]
            assert check["status"] == "error", check
            assert words in check["message"], check
        member_side = {c["title"]: c["status"] for c in json.loads(doctors["east"][1])["checks"]
                       if c["category"] == "multi-cluster"}
        assert member_side == {"the hub's serving intermediate is usable": "ok",
                               "the hub's client intermediate is usable": "ok"}

        # The same in process, for the metric and the status API.
        metrics = ReconcileMetrics()
        hub_reconciler = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True),
                                    metrics=metrics)
        report = hub_reconciler.run_pass()
        ready = {m: metrics.registry.get_sample_value("tls_injector_federation_member_ready", {"member": m})
                 for m in [*expected, *MEMBERS]}
        assert ready == {**dict.fromkeys(expected, 0.0), "east": 1.0, "west": 1.0}
        assert set(report.federation) == set(expected)
        assert report.write_count == 0
        assert hub_reconciler.status is not None
        assert {m.name: m.ready for m in hub_reconciler.status.members} == {**dict.fromkeys(expected, False),
                                                                             "east": True, "west": True}


def test_a_user_root_that_cannot_sign_intermediates_stops_with_its_reason_and_writes_no_chain() -> None:
    """`--ca-secret` naming a certificate that is not a CA, or a key that is not its own, stops the hub's pass
    with the reason (exit 1, the summary line, an Event on the Secret), as for a standalone cluster; a CA
    limited to leaves (path length 0) is kept for the hub's own leaves and each member is told why it gets no
    serving intermediate. No member gets a serving chain from any of them."""
    now = datetime.now(UTC)
    issuer = make_ca(common_name="some CA", now=now)
    leaf = issue_leaf(issuer=issuer, dns_names=["not-a-ca.example"], now=now)
    leaf_only = make_ca(common_name="leaf-only root", now=now, path_length=0)
    cases = {"not a CA": (leaf.cert_pem, leaf.key_pem),
             "key mismatch": (issuer.cert_pem, leaf_only.key_pem),
             "path length 0": (leaf_only.cert_pem, leaf_only.key_pem)}
    with ExitStack() as stack:
        member = stack.enter_context(running_emulator(seed=20))
        namespace(member, OWN_NS)
        hubs = {case: stack.enter_context(running_emulator(seed=21 + i)) for i, case in enumerate(cases)}
        for case, hub in hubs.items():
            namespace(hub, OWN_NS)
            register(hub, "east", member.kubeconfig())
            cert, key = cases[case]
            hub.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": "my-root", "namespace": OWN_NS},
                     "data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()}})
        ran = dict(zip(hubs, finished(*(cli(hub.url, "--hub", "--ca-secret", "my-root") for hub in hubs.values())),
                       strict=True))
        assert {case: code for case, (code, _, _) in ran.items()} == dict.fromkeys(cases, 1), ran
        stopped = {"not a CA": "the certificate is not a CA (basic constraints CA:TRUE and keyCertSign are required)",
                   "key mismatch": "the private key does not belong to the CA certificate"}
        for case, words in stopped.items():
            out = ran[case][1]
            assert f"stopped: CaUnusable: user-provided CA Secret {OWN_NS}/my-root: {words}" in out, out
            [event] = [e for e in hubs[case].objects("events", OWN_NS) if e["reason"] == "CaUnusable"]
            assert event["involvedObject"]["name"] == "my-root"
            assert words in event["message"]
        reasons = [json.loads(line)["reason"] for line in ran["path length 0"][2].splitlines()
                   if json.loads(line).get("msg") == "member not ready"]
        assert len(reasons) == 1, reasons
        assert "cannot sign intermediates: the root has path length 0" in reasons[0], reasons
        assert member.get("secrets", INTERMEDIATES[0], OWN_NS) is None, "no serving chain from a leaf-only root"
        assert member.get("secrets", INTERMEDIATES[1], OWN_NS) is not None, "the client root, generated, serves"

