"""The mission on running pods: tls-injector installed from its image as docs/install.md says, a
labelled Deployment's pods start with the certificate and bundle mounted and readable by a non-root
container, and a client pod verifies a server pod through its Service's DNS name with that bundle.

There is no DNS server on the node: the client pod names the Service by hostAliases (the kubelet writes
them into the pod's /etc/hosts), `web.node-mission.svc` -> the Service's ClusterIP. The name the client
verifies the certificate against is the Service's DNS name all the same; only its resolution differs.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.node.harness import Node
from tests.node.install import IMAGE_BUILD_SECONDS, Installed

# The first test here pays for the image build (cached by tools/image.py) and the install.
pytestmark = pytest.mark.timeout(IMAGE_BUILD_SECONDS + 600)
NS = "node-mission"
CERTS = "/etc/tls-injector/certs"
TRUST = "/etc/tls-injector/trust"
# The modes seen inside the container, `stat -L -c '%a %u %g'` (docs/node-tests.md records them): a
# Secret or ConfigMap volume's defaultMode 0644, owned by root; with fsGroup the kubelet gives the files
# that group (and keeps them group-readable). Non-root reads them either way, the key included; a
# stricter key is asked for with tls-injector.io/key-mode (below).
MODES_WITHOUT_FS_GROUP = {"tls.crt": "644 0 0", "tls.key": "644 0 0", "ca-bundle.crt": "644 0 0"}
MODES_WITH_FS_GROUP = {"tls.crt": "644 0 2000", "tls.key": "644 0 2000", "ca-bundle.crt": "644 0 2000"}


@pytest.fixture(scope="session")
def mission_namespace(node: Node, installed: Installed) -> str:
    node.kubectl("create", "namespace", NS)
    node.cp.wait_for_service_account(NS, "default")
    return NS


def deployment(node: Node, name: str, script: str, *, pod_security: dict[str, Any],
               annotations: dict[str, str] | None = None, host_aliases: list[dict[str, Any]] | None = None,
               restart: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1, "securityContext": pod_security,
        "containers": [{"name": "main", "image": node.busybox.name, "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", script],
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}]}
    if host_aliases:
        spec["hostAliases"] = host_aliases
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"},
                             "annotations": annotations or {}},
                "spec": spec}}}


def apply(node: Node, *objects: dict[str, Any]) -> None:
    node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def running_pod(node: Node, app: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = node.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}")["items"]
        if pods:
            return node.wait_pod(NS, pods[0]["metadata"]["name"])
        time.sleep(0.5)
    raise AssertionError(f"no pod of {app} in 120 s:\n{node.pod_events(NS, app)}\n{node.diagnosis()}")


def wait_log(node: Node, pod: str, marker: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        log = node.container_log(NS, pod, "main")
        if marker in log:
            return log
        time.sleep(0.5)
    raise AssertionError(f"no {marker!r} in {NS}/{pod}'s log after {timeout:.0f} s: {log!r}\n{node.diagnosis()}")


def modes(log: str) -> dict[str, str]:
    found = {}
    for line in log.splitlines():
        if line.startswith("mode "):
            _, value_a, value_b, value_c, path = line.split(" ", 4)
            found[path.rsplit("/", 1)[1]] = f"{value_a} {value_b} {value_c}"
    return found


SHOW = (f"for f in {CERTS}/tls.crt {CERTS}/tls.key {TRUST}/ca-bundle.crt; do "
        "echo mode $(stat -L -c '%a %u %g' $f) $f; done; "
        f"id; cat {CERTS}/tls.key > /dev/null && echo key-readable; cat {TRUST}/ca-bundle.crt > /dev/null && "
        "echo bundle-readable; echo done; sleep 3600")


@pytest.mark.parametrize(("name", "pod_security", "expected"), [
    ("plain", {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}, MODES_WITHOUT_FS_GROUP),
    ("fsgroup", {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
     MODES_WITH_FS_GROUP),
])
def test_a_labelled_deployments_pod_reads_its_certificate_and_bundle_as_non_root(
        node: Node, mission_namespace: str, name: str, pod_security: dict[str, Any],
        expected: dict[str, str]) -> None:
    apply(node, deployment(node, name, SHOW, pod_security=pod_security))
    pod = running_pod(node, name)
    assert "tls-injector.io/injected" in pod["metadata"]["annotations"], pod["metadata"]
    log = wait_log(node, pod["metadata"]["name"], "done")
    assert "uid=1000" in log, log
    assert "key-readable" in log, log
    assert "bundle-readable" in log, log
    assert modes(log) == expected, log


def test_a_client_pod_verifies_a_server_pod_by_its_service_name_and_refuses_a_wrong_ca(
        node: Node, mission_namespace: str) -> None:
    non_root = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    server = deployment(node, "web", f"exec node-probe serve -addr :8443 -cert {CERTS}/tls.crt "
                                     f"-key {CERTS}/tls.key", pod_security=non_root)
    server["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 8443}, "periodSeconds": 1}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 443, "targetPort": 8443}]}}
    apply(node, server, service)
    running_pod(node, "web")
    cluster_ip = node.get_json(f"/api/v1/namespaces/{NS}/services/web")["spec"]["clusterIP"]
    names = [f"web.{NS}.svc", f"web.{NS}.svc.cluster.local"]
    # The right bundle, then a wrong CA: the cluster's own CA (the service account's ca.crt) signed
    # the apiserver, not this server; the client must refuse it.
    # kube-proxy programs a new Service's rules a moment after its endpoints are ready (until then the
    # ClusterIP answers "connection refused"): the right bundle is tried for up to 60 s, the wrong CA once
    # the Service answers.
    script = (f"i=0; while [ $i -lt 60 ]; do node-probe get -ca {TRUST}/ca-bundle.crt https://web.{NS}.svc/ "
              "&& echo right-ca-ok && break; i=$((i+1)); sleep 1; done; "
              f"node-probe get -ca /var/run/secrets/kubernetes.io/serviceaccount/ca.crt https://web.{NS}.svc/ "
              "&& echo wrong-ca-accepted || echo wrong-ca-refused; echo done; sleep 3600")
    client = deployment(node, "client", script, pod_security=non_root,
                        annotations={"tls-injector.io/mode": "trust-only"},
                        host_aliases=[{"ip": cluster_ip, "hostnames": names}])
    client["spec"]["template"]["spec"]["automountServiceAccountToken"] = True
    apply(node, client)
    pod = running_pod(node, "client")
    log = wait_log(node, pod["metadata"]["name"], "done")
    assert "ok client=-" in log, log
    assert "right-ca-ok" in log, log
    assert "wrong-ca-refused" in log, log
    assert "certificate signed by unknown authority" in log, log


# The key's mode (tls-injector.io/key-mode, docs/injection.md "The key's mode"): the volume's defaultMode,
# then, with fsGroup, the kubelet's own change (group root:<fsGroup>, group read added: mode | 0440, as its
# pkg/volume SetVolumeOwnership does for a read-only volume). What the container sees, `stat -L`:
KEY_MODES_SEEN = {
    ("0400", True): "440 0 2000", ("0440", True): "440 0 2000",
    ("0600", True): "640 0 2000", ("0640", True): "640 0 2000",
    ("0400", False): "400 0 0",
}
KEY = f"{CERTS}/tls.key"
SHOW_KEY = (f"echo mode $(stat -L -c '%a %u %g' {KEY}) {KEY}; "
            f"echo mode $(stat -L -c '%a %u %g' {CERTS}/tls.crt) {CERTS}/tls.crt; id; "
            f"if cat {KEY} > /dev/null 2>&1; then echo key-readable; else echo key-unreadable; fi; "
            "echo done; sleep 3600")


def postgres_accepts_key(mode: int, owner: int, process_uid: int) -> bool:
    """PostgreSQL's rule for ssl_key_file (its documentation, "Secure TCP/IP Connections with SSL"): owned by
    the database user with no group or world access, or owned by root with group read at most (no group
    write or execute, no world access); and it must be owned by one of the two."""
    if owner == 0:
        return not mode & 0o037
    return owner == process_uid and not mode & 0o077


@pytest.mark.parametrize(("key_mode", "fs_group"), list(KEY_MODES_SEEN), ids=str)
def test_the_key_mode_annotation_sets_the_mode_a_non_root_container_sees(
        node: Node, mission_namespace: str, key_mode: str, fs_group: bool) -> None:
    security: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    if fs_group:
        security["fsGroup"] = 2000
    name = f"key-{key_mode}-{'fsgroup' if fs_group else 'plain'}"
    apply(node, deployment(node, name, SHOW_KEY, pod_security=security,
                           annotations={"tls-injector.io/key-mode": key_mode}))
    pod = running_pod(node, name)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "tls-injector-cert")
    assert volume["secret"]["defaultMode"] == int(key_mode, 8), volume
    assert json.loads(pod["metadata"]["annotations"]["tls-injector.io/injected"])["keyMode"] == key_mode
    log = wait_log(node, pod["metadata"]["name"], "done")
    seen = modes(log)
    assert seen["tls.key"] == KEY_MODES_SEEN[key_mode, fs_group], log
    assert seen["tls.crt"] == seen["tls.key"], log  # the whole volume's mode
    mode, owner, _ = seen["tls.key"].split()
    if fs_group:  # readable by the container through its fsGroup, and what PostgreSQL accepts
        assert "key-readable" in log, log
        ids = next(line for line in log.splitlines() if line.startswith("uid="))
        assert "2000" in ids.split("groups=", 1)[1].split(","), log
        assert postgres_accepts_key(int(mode, 8), int(owner), 1000), seen
    else:  # root:root 0400: a non-root container cannot read it (the /mutate warning says so)
        assert "key-unreadable" in log, log


def test_the_postgres_rule_as_written_refuses_what_the_default_mode_gives() -> None:
    """The rule above can fail: the default 0644 (MODES_WITH_FS_GROUP) is refused, 0600 owned by another
    non-root user is refused, 0600 owned by the process is accepted."""
    assert not postgres_accepts_key(0o644, 0, 1000)
    assert not postgres_accepts_key(0o660, 0, 1000)
    assert postgres_accepts_key(0o640, 0, 1000)
    assert not postgres_accepts_key(0o600, 999, 1000)
    assert not postgres_accepts_key(0o640, 1000, 1000)
    assert postgres_accepts_key(0o600, 1000, 1000)


# Dry-run and apply-time refusals answered by the webhook pods behind their Service (the install above:
# manifests/base, registered by Service reference with the caBundle the reconciler keeps; the
# admission-policy component is not installed, so the webhook alone answers).
DISABLE_MESSAGE = "can be enabled in place, but not turned off or pointed at another Secret"


def apply_result(node: Node, manifest: dict[str, Any], *extra: str) -> Any:
    return node.kubectl("apply", *extra, "-f", "-", stdin=json.dumps(manifest), check=False)


def stored_template(node: Node, name: str) -> dict[str, Any]:
    found = node.get_json(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
    return {"generation": found["metadata"]["generation"], "metadata": found["spec"]["template"]["metadata"]}


@pytest.mark.parametrize("change", ["disable", "swap"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "apply"])
def test_the_webhook_pods_refuse_turning_tls_off_or_swapping_the_secret(
        node: Node, mission_namespace: str, change: str, dry_run: bool) -> None:
    name = f"guard-{change}-{'dry' if dry_run else 'real'}"
    security = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    before = deployment(node, name, "sleep 3600", pod_security=security,
                        annotations={"tls-injector.io/secret-name": f"{name}-tls"})
    assert apply_result(node, before).returncode == 0
    stored = stored_template(node, name)
    after = json.loads(json.dumps(before))
    template = after["spec"]["template"]["metadata"]
    if change == "disable":
        del template["labels"]["tls-injector.io/inject"]
    else:
        template["annotations"]["tls-injector.io/secret-name"] = "other-tls"
    refused = apply_result(node, after, *(["--dry-run=server"] if dry_run else []))
    assert refused.returncode != 0, refused.stdout
    assert 'admission webhook "' in refused.stderr, refused.stderr
    assert DISABLE_MESSAGE in " ".join(refused.stderr.split()), refused.stderr
    assert stored_template(node, name) == stored, "a refused change changed the Deployment"


def test_a_dry_run_create_is_answered_by_the_webhook_pods_with_a_warning_naming_the_secret(
        node: Node, mission_namespace: str) -> None:
    security = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    created = apply_result(node, deployment(node, "preview", "sleep 3600", pod_security=security,
                                            annotations={"tls-injector.io/key-mode": "0400"}), "--dry-run=server")
    assert created.returncode == 0, created.stderr
    warned = " ".join(created.stderr.split())
    assert "Warning:" in warned, warned
    assert "preview-tls" in warned, warned
    assert "mode 0400 (tls-injector.io/key-mode)" in warned, warned
    missing = node.kubectl("get", "deployment", "preview", "-n", NS, check=False)
    assert missing.returncode != 0, missing.stdout  # a dry run: nothing made
    assert "NotFound" in missing.stderr, missing.stderr
