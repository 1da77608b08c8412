"""The injection modes on running pods (docs/injection.md): pod certificates with the real kubelet,
trust alone, the JVM keystore, and a StatefulSet's peers verifying each other by their per-pod names.

tls-injector is installed from its image as docs/install.md says (tests/node/install.py), and the
webhook Deployment given `--pod-certificates=on`, as docs/install.md tells a cluster that serves pod
certificates (Kubernetes 1.37: PodCertificateRequest, ClusterTrustBundle and its projection are GA and on
by default, in the apiserver and the kubelet alike; the node needs no feature gate or runtime-config).

There is no DNS server on the node: a client names a Service by hostAliases mapped to its ClusterIP, and a
StatefulSet's pod names its peer `<pod>.<service>.<namespace>.svc` by hostAliases mapped to that peer's pod
IP (the kubelet writes them into the pod's /etc/hosts). The names verified against the certificates are
the DNS names all the same; only their resolution differs.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.cluster.controlplane import api_client
from tests.node import pods
from tests.node.harness import NODE_NAME, Node
from tests.node.install import IMAGE_BUILD_SECONDS, Installed
from tests.node.pods import CERTS, NON_ROOT, TRUST, apply, modes, show_modes
from tls_injector.names import CLUSTER_TRUST_BUNDLE, MODE_ANNOTATION, MODE_POD_CERTIFICATE, SIGNER_NAME
from tls_injector.pki import load_certificates, verify_server

# The first node test of a session pays for the image build (cached by tools/image.py) and the install.
pytestmark = pytest.mark.timeout(IMAGE_BUILD_SECONDS + 600)
NS = "node-modes"
OTHER_NODE = "tls-injector-other-node"
PCR_PATH = f"/apis/certificates.k8s.io/v1/namespaces/{NS}/podcertificaterequests"


@pytest.fixture(scope="session")
def modes_namespace(node: Node, installed: Installed) -> str:
    installed.serve_pod_certificates()
    return pods.make_namespace(node, NS)


def dump(*paths: str) -> str:
    """Shell that prints each file between `begin <path>` and `end <path>` lines."""
    return "".join(f"echo begin {path}; cat {path}; echo end {path}; " for path in paths)


def dumped(log: str, path: str) -> str:
    return log.split(f"begin {path}\n", 1)[1].split(f"end {path}", 1)[0]


def pod_certificate_requests(node: Node, pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [found for found in node.get_json(PCR_PATH)["items"]
            if found["spec"]["podUID"] == pod["metadata"]["uid"]]


# What the containers see (`stat -L`), measured here; docs/injection.md ("Two modes") records it. The kubelet
# writes a projected volume's podCertificate and clusterTrustBundle files with the volume's defaultMode
# only when it knows no single user for the pod: when every container runs as one uid (here 1000, the
# pod's runAsUser) or the pod has an fsGroup, they are 0600 and owned by that uid (pkg/volume/projected,
# as for a service-account token), and with fsGroup the kubelet then gives them that group and group read.
# So tls-injector.io/key-mode (the volume's defaultMode) changes nothing for such a pod: its key is its
# own user's, 0600 or 0640.
POD_CERT_MODES = {"tls.crt": "600 1000 0", "tls.key": "600 1000 0", "ca.crt": "600 1000 0",
                  "ca-bundle.crt": "600 1000 0"}
POD_CERT_MODES_0400_FS_GROUP = {"tls.crt": "640 1000 2000", "tls.key": "640 1000 2000", "ca.crt": "640 1000 2000",
                                "ca-bundle.crt": "640 1000 2000"}
POD_CERT_FILES = (f"{CERTS}/tls.crt", f"{CERTS}/tls.key", f"{CERTS}/ca.crt", f"{TRUST}/ca-bundle.crt")


def test_a_pod_certificate_is_asked_for_by_the_kubelet_signed_by_our_signer_and_verified_by_a_client_pod(
        node: Node, modes_namespace: str) -> None:
    server_script = (show_modes(*POD_CERT_FILES) + dump(f"{CERTS}/tls.crt", f"{TRUST}/ca-bundle.crt")
                     + f"head -1 {CERTS}/tls.key; echo done; "
                     f"exec node-probe serve -addr :8443 -cert {CERTS}/tls.crt -key {CERTS}/tls.key")
    server = pods.deployment(node, NS, "pcweb", server_script, pod_security=NON_ROOT,
                             annotations={MODE_ANNOTATION: MODE_POD_CERTIFICATE})
    server["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 8443}, "periodSeconds": 1}
    apply(node, server, pods.service(NS, "pcweb"))
    pod = pods.running_pod(node, NS, "pcweb")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    sources = volumes["tls-injector-cert"]["projected"]["sources"]
    assert sources[0]["podCertificate"]["signerName"] == SIGNER_NAME, sources
    assert "secret" not in volumes["tls-injector-cert"], volumes
    assert volumes["tls-injector-trust"]["projected"]["sources"] == [
        {"clusterTrustBundle": {"name": CLUSTER_TRUST_BUNDLE, "path": "ca-bundle.crt"}}], volumes

    # The request the kubelet made for this pod, as this node, answered by our signer.
    (request,) = pod_certificate_requests(node, pod)
    assert request["spec"]["nodeName"] == NODE_NAME, request["spec"]
    spec_writers = [f["manager"] for f in request["metadata"]["managedFields"] if not f.get("subresource")]
    assert spec_writers == ["kubelet"], request["metadata"]  # who wrote it: the kubelet; our signer the status
    assert request["spec"]["signerName"] == SIGNER_NAME, request["spec"]
    assert request["spec"]["podName"] == pod["metadata"]["name"], request["spec"]
    (issued,) = [c for c in request["status"]["conditions"] if c["type"] == "Issued"]
    assert issued["status"] == "True", request["status"]

    log = pods.wait_log(node, NS, pod["metadata"]["name"], "done")
    assert modes(log) == POD_CERT_MODES, log
    assert "-----BEGIN PRIVATE KEY-----" in log, log  # the key the kubelet made, PKCS#8 PEM
    # The chain the pod holds is the signer's answer, and the bundle is the ClusterTrustBundle.
    held = load_certificates(dumped(log, f"{CERTS}/tls.crt").encode())
    assert held == load_certificates(request["status"]["certificateChain"].encode()), log
    bundle = node.get_json(f"/apis/certificates.k8s.io/v1/clustertrustbundles/{CLUSTER_TRUST_BUNDLE}")
    assert bundle["spec"]["signerName"] == SIGNER_NAME
    trusted = load_certificates(dumped(log, f"{TRUST}/ca-bundle.crt").encode())
    assert trusted == load_certificates(bundle["spec"]["trustBundle"].encode()), log
    names = held[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert f"pcweb.{NS}.svc" in names, names
    verify_server(held[0], held[1:], trusted=trusted, dns_name=f"pcweb.{NS}.svc", now=datetime.now(UTC))

    # A client pod, itself in pod-certificate mode (its trust from its own ClusterTrustBundle projection),
    # with a key mode and fsGroup: it verifies the server by the Service's name, and refuses the same
    # server under a name its certificate does not hold.
    cluster_ip = node.get_json(f"/api/v1/namespaces/{NS}/services/pcweb")["spec"]["clusterIP"]
    client_script = (show_modes(*POD_CERT_FILES)
                     + f"i=0; while [ $i -lt 60 ]; do node-probe get -ca {TRUST}/ca-bundle.crt "
                     f"https://pcweb.{NS}.svc/ && echo right-name-ok && break; i=$((i+1)); sleep 1; done; "
                     f"node-probe get -ca {TRUST}/ca-bundle.crt https://other.{NS}.svc/ "
                     "&& echo wrong-name-accepted || echo wrong-name-refused; echo done; sleep 3600")
    client = pods.deployment(
        node, NS, "pcclient", client_script, pod_security={**NON_ROOT, "fsGroup": 2000},
        annotations={MODE_ANNOTATION: MODE_POD_CERTIFICATE, "tls-injector.io/key-mode": "0400"},
        host_aliases=[{"ip": cluster_ip, "hostnames": [f"pcweb.{NS}.svc", f"other.{NS}.svc"]}])
    apply(node, client)
    client_pod = pods.running_pod(node, NS, "pcclient")
    assert len(pod_certificate_requests(node, client_pod)) == 1
    log = pods.wait_log(node, NS, client_pod["metadata"]["name"], "done", timeout=90)
    assert "right-name-ok" in log, log
    assert "wrong-name-refused" in log, log
    assert f"not other.{NS}.svc" in log, log
    assert modes(log) == POD_CERT_MODES_0400_FS_GROUP, log

    # A pod whose user the kubelet does not know (no runAsUser: the image's, root here) and no fsGroup:
    # there the volume's defaultMode, the key mode, is what the files get.
    unknown_user = pods.deployment(node, NS, "pcimageuser", show_modes(*POD_CERT_FILES) + "echo done; sleep 3600",
                                   pod_security={}, annotations={MODE_ANNOTATION: MODE_POD_CERTIFICATE,
                                                                 "tls-injector.io/key-mode": "0440"})
    apply(node, unknown_user)
    log = pods.wait_log(node, NS, pods.running_pod(node, NS, "pcimageuser")["metadata"]["name"], "done")
    assert modes(log) == {**dict.fromkeys(POD_CERT_MODES, "440 0 0"), "ca-bundle.crt": "644 0 0"}, log


def pcr_body(pod: dict[str, Any], account_uid: str, node_name: str, node_uid: str) -> dict[str, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
            "metadata": {"generateName": "req-", "namespace": NS},
            "spec": {"signerName": SIGNER_NAME, "podName": pod["metadata"]["name"], "podUID": pod["metadata"]["uid"],
                     "serviceAccountName": "default", "serviceAccountUID": account_uid,
                     "nodeName": node_name, "nodeUID": node_uid,
                     "stubPKCS10Request": base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()}}


def test_another_node_cannot_ask_for_the_certificate_of_a_pod_running_here(node: Node, modes_namespace: str) -> None:
    """NodeRestriction on the real node: a request for the running pod made with another node's credentials
    is refused, naming itself or this node; the same request as this node is accepted (so the refusal is
    the node's, not the request's). The other node is a Node object only, tainted so nothing lands on it."""
    pod = pods.running_pod(node, NS, "pcweb")
    account = node.get_json(f"/api/v1/namespaces/{NS}/serviceaccounts/default")["metadata"]["uid"]
    here = node.get_json(f"/api/v1/nodes/{NODE_NAME}")["metadata"]["uid"]
    node.kubectl("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER_NODE},
        "spec": {"unschedulable": True,
                 "taints": [{"key": "tls-injector.test/not-a-node", "effect": "NoSchedule"}]}}))
    try:
        other = node.get_json(f"/api/v1/nodes/{OTHER_NODE}")["metadata"]["uid"]
        intruder = kubernetes.client.CertificatesV1Api(api_client(node.cp.node_kubeconfig(OTHER_NODE)))
        refusals = []
        for name, uid in ((OTHER_NODE, other), (NODE_NAME, here)):
            with pytest.raises(kubernetes.client.ApiException) as refused:
                intruder.create_namespaced_pod_certificate_request(NS, pcr_body(pod, account, name, uid))
            assert refused.value.status == 403, refused.value.body
            refusals.append(json.loads(refused.value.body)["message"])
        assert f'is not running on node "{OTHER_NODE}"' in refusals[0], refusals
        assert f'which is not the requesting node "{OTHER_NODE}"' in refusals[1], refusals
        kubelet = kubernetes.client.CertificatesV1Api(api_client(node.cp.node_kubeconfig(NODE_NAME)))
        accepted = kubelet.create_namespaced_pod_certificate_request(NS, pcr_body(pod, account, NODE_NAME, here))
        assert accepted.spec.node_name == NODE_NAME
    finally:
        node.kubectl("delete", "node", OTHER_NODE, "--wait=false")


def test_a_trust_only_pod_gets_the_bundle_and_no_certificate_volume(node: Node, modes_namespace: str) -> None:
    script = (f"if [ -e {CERTS} ]; then echo cert-dir-present; else echo no-cert-dir; fi; "
              f"echo mounts $(grep -c /etc/tls-injector/ /proc/mounts) trust $(grep -c ' {TRUST} ' /proc/mounts); "
              + show_modes(f"{TRUST}/ca-bundle.crt")
              + f"cat {TRUST}/ca-bundle.crt > /dev/null && echo bundle-readable; "
              "echo SSL_CERT_FILE=$SSL_CERT_FILE; echo done; sleep 3600")
    apply(node, pods.deployment(node, NS, "caller", script, pod_security=NON_ROOT,
                                annotations={MODE_ANNOTATION: "trust-only"}))
    pod = pods.running_pod(node, NS, "caller")
    record = json.loads(pod["metadata"]["annotations"]["tls-injector.io/injected"])
    assert record["mode"] == "trust-only", record
    assert record["secret"] == "", record
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls-injector-trust"]["configMap"]["name"] == "tls-injector-trust-bundle", volumes
    ours = [name for name in volumes if name.startswith("tls-injector")]
    assert ours == ["tls-injector-trust"], volumes
    assert not [v for v in volumes.values() if "secret" in v], volumes  # no Secret at all
    log = pods.wait_log(node, NS, pod["metadata"]["name"], "done")
    assert "no-cert-dir" in log, log
    assert "mounts 1 trust 1" in log, log
    assert "bundle-readable" in log, log
    assert modes(log) == {"ca-bundle.crt": "644 0 0"}, log
    assert f"SSL_CERT_FILE={TRUST}/ca-bundle.crt" in log, log
    secrets = node.get_json(f"/api/v1/namespaces/{NS}/secrets")["items"]
    assert not [s for s in secrets if s["metadata"]["name"] == "caller-tls"], "a trust-only workload got a Secret"


# The keystore, opened in a second container from the product image (its Python and `cryptography`): the
# password file opens keystore.p12, whose one entry `tls` holds the key of tls.key and the chain of tls.crt,
# and truststore.p12, whose entries are the CAs of ca.crt; a wrong password does not open it.
OPEN_KEYSTORE = f"""
import time
from pathlib import Path
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.serialization import pkcs12
certs = Path("{CERTS}")
deadline = time.monotonic() + 150
while not (certs / "keystore.p12").exists() and time.monotonic() < deadline:
    time.sleep(1)
password = (certs / "keystore.password").read_bytes()
der = serialization.Encoding.DER
public = serialization.PublicFormat.SubjectPublicKeyInfo
store = pkcs12.load_pkcs12((certs / "keystore.p12").read_bytes(), password)
key = serialization.load_pem_private_key((certs / "tls.key").read_bytes(), None)
chain = x509.load_pem_x509_certificates((certs / "tls.crt").read_bytes())
print("keystore-alias", store.cert.friendly_name.decode(), flush=True)
print("keystore-key-matches", store.key.public_key().public_bytes(der, public)
      == key.public_key().public_bytes(der, public), flush=True)
print("keystore-chain-matches", [store.cert.certificate, *[c.certificate for c in store.additional_certs]] == chain,
      flush=True)
trust = pkcs12.load_pkcs12((certs / "truststore.p12").read_bytes(), password)
cas = x509.load_pem_x509_certificates((certs / "ca.crt").read_bytes())
print("truststore-matches", sorted(c.certificate.fingerprint(hashes.SHA256()) for c in trust.additional_certs)
      == sorted(c.fingerprint(hashes.SHA256()) for c in cas), trust.key is None, flush=True)
try:
    pkcs12.load_pkcs12((certs / "keystore.p12").read_bytes(), b"not-the-password")
    print("wrong-password-opens", flush=True)
except ValueError:
    print("wrong-password-refused", flush=True)
print("done", flush=True)
time.sleep(3600)
"""
KEYSTORE_FILES = tuple(f"{CERTS}/{name}" for name in ("keystore.p12", "truststore.p12", "keystore.password",
                                                       "tls.key"))
# What the container (uid 1000) sees, `stat -L`: the keystore's files are keys of the workload's Secret,
# so they have the certificate volume's mode, tls.key's (docs/injection.md, "Java keystores").
KEYSTORE_MODES = {
    "default": ({}, {}, "644 0 0"),
    "key-mode-0400-fsgroup": ({"tls-injector.io/key-mode": "0400"}, {"fsGroup": 2000}, "440 0 2000"),
}


@pytest.mark.parametrize("case", list(KEYSTORE_MODES))
def test_a_keystore_workloads_container_sees_its_keystore_and_it_opens_with_its_password(
        node: Node, modes_namespace: str, installed: Installed, case: str) -> None:
    annotations, security, seen = KEYSTORE_MODES[case]
    name = f"jvm-{case}"
    script = (f"i=0; while [ ! -e {CERTS}/keystore.p12 ] && [ $i -lt 150 ]; do i=$((i+1)); sleep 1; done; "
              + show_modes(*KEYSTORE_FILES) + "id; "
              + "".join(f"cat {path} > /dev/null && echo readable {path}; " for path in KEYSTORE_FILES)
              + "echo done; sleep 3600")
    workload = pods.deployment(node, NS, name, script, pod_security={**NON_ROOT, **security},
                               annotations={"tls-injector.io/keystore": "pkcs12", **annotations})
    spec = workload["spec"]["template"]["spec"]
    spec["containers"].append({"name": "open", "image": installed.image, "imagePullPolicy": "Never",
                               "command": ["python", "-c", OPEN_KEYSTORE],
                               "securityContext": spec["containers"][0]["securityContext"]})
    apply(node, workload)
    pod = pods.running_pod(node, NS, name)
    log = pods.wait_log(node, NS, pod["metadata"]["name"], "done", timeout=180)
    assert modes(log) == {path.rsplit("/", 1)[1]: seen for path in KEYSTORE_FILES}, log
    for path in KEYSTORE_FILES:
        assert f"readable {path}" in log, log
    opened = pods.wait_log(node, NS, pod["metadata"]["name"], "done", container="open", timeout=180)
    assert "keystore-alias tls" in opened, opened
    assert "keystore-key-matches True" in opened, opened
    assert "keystore-chain-matches True" in opened, opened
    assert "truststore-matches True True" in opened, opened
    assert "wrong-password-refused" in opened, opened


# StatefulSet peers: each pod serves with its certificate and dials its peer by the peer's own name,
# `<pod>.<service>.<namespace>.svc`, verifying it with the bundle it mounts. With no DNS server, the names
# come from hostAliases pointing at the peer's pod IP, which is only known once that pod runs: so the
# StatefulSet (updateStrategy OnDelete) starts without them, its template is then given the peers' IPs and
# peer 1 is re-created (it dials peer 0), then given peer 1's new IP and peer 0 is re-created (it dials the
# new peer 1). Each also dials its peer under names it must not accept: one of another Service, refused in
# both modes; another pod's name under the same Service, which the Secret's wildcard holds
# (`*.<service>.<namespace>.svc`) and a pod certificate (its pod's exact name only) does not.
PEER_SCRIPT = (
    'case "$POD_NAME" in *-0) other="${POD_NAME%-0}-1";; *) other="${POD_NAME%-1}-0";; esac; '
    "set=${POD_NAME%-*}; "
    f"node-probe serve -addr :8443 -cert {CERTS}/tls.crt -key {CERTS}/tls.key & "
    "i=0; while [ $i -lt 120 ]; do "
    f"if node-probe get -ca {TRUST}/ca-bundle.crt https://$other.$set.{NS}.svc:8443/; then echo peer-ok $other; "
    "break; fi; i=$((i+1)); sleep 1; done; "
    f"node-probe get -ca {TRUST}/ca-bundle.crt https://$other.elsewhere.{NS}.svc:8443/ "
    "&& echo other-service-accepted || echo other-service-refused; "
    f"node-probe get -ca {TRUST}/ca-bundle.crt https://$set-7.$set.{NS}.svc:8443/ "
    "&& echo other-pod-accepted || echo other-pod-refused; "
    "echo done; wait")


def stateful_set(node: Node, name: str, mode: str, aliases: list[dict[str, Any]]) -> dict[str, Any]:
    spec = pods.pod_spec(node, PEER_SCRIPT, pod_security=NON_ROOT, host_aliases=aliases)
    spec["containers"][0]["env"] = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    spec["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8443}, "periodSeconds": 1}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 2, "serviceName": name, "podManagementPolicy": "Parallel",
                     "updateStrategy": {"type": "OnDelete"},
                     "selector": {"matchLabels": {"app": name}}, "template": {
                         "metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"},
                                      "annotations": {MODE_ANNOTATION: mode}},
                         "spec": spec}}}


def running_peer(node: Node, name: str, not_uid: str = "") -> dict[str, Any]:
    """StatefulSet pod `name` once running and Ready, and not the one of uid `not_uid`."""
    deadline = time.monotonic() + pods.APPEAR_SECONDS
    while time.monotonic() < deadline:
        status, body = node.cp.get(f"/api/v1/namespaces/{NS}/pods/{name}")
        if status == 200 and json.loads(body)["metadata"]["uid"] != not_uid:
            return node.wait_pod(NS, name)
        time.sleep(0.5)
    raise AssertionError(f"no new pod {name} in {pods.APPEAR_SECONDS:.0f} s:\n{node.pod_events(NS, name)}")


def peer_aliases(name: str, ips: dict[str, str], dialled: str) -> list[dict[str, Any]]:
    """Each peer's name -> its pod IP; the peer to be dialled also under the two names it must not pass by."""
    return [{"ip": ip, "hostnames": [f"{pod}.{name}.{NS}.svc", f"{pod}.elsewhere.{NS}.svc",
                                     *([f"{name}-7.{name}.{NS}.svc"] if pod == dialled else [])]}
            for pod, ip in sorted(ips.items())]


@pytest.mark.parametrize(("name", "mode", "other_pod"), [
    ("peer", "secret", "accepted"), ("pcpeer", MODE_POD_CERTIFICATE, "refused")])
def test_statefulset_peers_verify_each_other_by_their_per_pod_names(
        node: Node, modes_namespace: str, name: str, mode: str, other_pod: str) -> None:
    first, second = f"{name}-0", f"{name}-1"
    apply(node, pods.service(NS, name, port=8443, headless=True), stateful_set(node, name, mode, []))
    ips = {pod: running_peer(node, pod)["status"]["podIP"] for pod in (first, second)}

    def renew(pod: str, peer: str) -> tuple[dict[str, Any], str]:
        """Give the template the peers' current IPs, re-create `pod`, and read what it saw."""
        old = node.get_json(f"/api/v1/namespaces/{NS}/pods/{pod}")["metadata"]["uid"]
        node.kubectl("patch", "statefulset", name, "-n", NS, "--type=merge", "-p", json.dumps(
            {"spec": {"template": {"spec": {"hostAliases": peer_aliases(name, ips, peer)}}}}))
        node.kubectl("delete", "pod", pod, "-n", NS, "--wait=false")
        new = running_peer(node, pod, not_uid=old)
        ips[pod] = new["status"]["podIP"]
        return new, pods.wait_log(node, NS, pod, "done", timeout=150, uid=new["metadata"]["uid"])

    for pod, peer in ((second, first), (first, second)):
        created, log = renew(pod, peer)
        assert f"peer-ok {peer}" in log, log
        assert "other-service-refused" in log, log
        assert f"not {peer}.elsewhere.{NS}.svc" in log, log  # refused for the name, not the connection
        assert f"other-pod-{other_pod}" in log, log
        if other_pod == "refused":
            assert f"not {name}-7.{name}.{NS}.svc" in log, log
        assert created["spec"]["hostname"] == pod, created["spec"]
        assert created["spec"]["subdomain"] == name, created["spec"]
    if mode == MODE_POD_CERTIFICATE:  # each pod its own key and its own exact names, never a wildcard
        for request in node.get_json(PCR_PATH)["items"]:
            if request["spec"]["podName"] not in (first, second):
                continue
            leaf = load_certificates(request["status"]["certificateChain"].encode())[0]
            names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
                x509.DNSName)
            own = request["spec"]["podName"]
            assert f"{own}.{name}.{NS}.svc" in names, names
            assert not [n for n in names if n.startswith("*") or (n.startswith(f"{name}-") and not n.startswith(own))]
