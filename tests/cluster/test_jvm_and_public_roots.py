"""Issue 39 points 4 and 5 on the real control plane, with the shipped install's reconciler running as its
own account under the shipped RBAC and policies: a Deployment asking for a keystore gets a Secret whose
keystore and truststore the JDK's keytool lists (with the generated password, and with one read from a
Secret of the tenant's own); a namespace labelled for public roots gets the extra key in its bundle and
the release it comes from; a pod asking has its TLS variables pointed at it by the webhook; turning the
keystore off in place is refused at `kubectl apply --dry-run=server`."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import certifi
import kubernetes.client

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import Installation, wait_until
from tests.cluster.test_mission import apply, deployment, make_namespace

KEYSTORE, PASSWORD = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
PUBLIC, PUBLIC_KEY = "tls-injector.io/public-roots", "ca-bundle-with-public-roots.pem"


def _with(manifest: dict[str, Any], **annotations: str) -> dict[str, Any]:
    manifest["spec"]["template"]["metadata"]["annotations"].update(annotations)
    return manifest


def _secret_data(installed: Installation, namespace: str, name: str, key: str) -> dict[str, bytes] | None:
    try:
        secret = installed.core.read_namespaced_secret(name, namespace)
    except kubernetes.client.ApiException:  # not there yet
        return None
    found = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
    return found if key in found else None


def _keytool(path: Path, password: bytes) -> str:
    keytool = shutil.which("keytool")
    assert keytool, "keytool is not installed: `python3.11 tools/dev.py test` installs the JDK"
    done = subprocess.run([keytool, "-list", "-v", "-storetype", "PKCS12", "-keystore", str(path), "-storepass",
                           password.decode()], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_deployment_asking_for_a_keystore_gets_a_secret_whose_stores_keytool_lists(
        cluster: ControlPlane, installed: Installation, tmp_path: Path) -> None:
    make_namespace(cluster, installed.core, "jvm-keystore")
    assert apply(cluster, _with(deployment("billing", "jvm-keystore", replicas=0), **{KEYSTORE: "pkcs12"})
                 ).returncode == 0
    stored = wait_until("billing-tls with its keystore",
                        lambda: _secret_data(installed, "jvm-keystore", "billing-tls", "keystore.p12"))
    for key in ("keystore.p12", "truststore.p12"):
        (tmp_path / key).write_bytes(stored[key])
    listed = _keytool(tmp_path / "keystore.p12", stored["keystore.password"])
    assert "Entry type: PrivateKeyEntry" in listed
    assert "DNSName: billing.jvm-keystore.svc" in listed
    assert "Entry type: trustedCertEntry" in _keytool(tmp_path / "truststore.p12", stored["keystore.password"])
    turned_off = apply(cluster, deployment("billing", "jvm-keystore", replicas=0), "--dry-run=server")
    assert turned_off.returncode != 0
    assert "can be asked for in place, but not turned off" in " ".join(turned_off.stderr.split())


def test_a_password_from_the_tenants_own_secret_is_used_and_never_copied(
        cluster: ControlPlane, installed: Installation, tmp_path: Path) -> None:
    make_namespace(cluster, installed.core, "jvm-password")
    installed.core.create_namespaced_secret("jvm-password", {
        "metadata": {"name": "billing-keystore-password"}, "type": "Opaque",
        "data": {"keystore.password": base64.b64encode(b"Correct-Horse-9").decode()}})
    assert apply(cluster, _with(deployment("billing", "jvm-password", replicas=0), **{
        KEYSTORE: "pkcs12", PASSWORD: "billing-keystore-password"})).returncode == 0
    stored = wait_until("billing-tls with its keystore",
                        lambda: _secret_data(installed, "jvm-password", "billing-tls", "keystore.p12"))
    assert "keystore.password" not in stored
    (tmp_path / "keystore.p12").write_bytes(stored["keystore.p12"])
    assert "PrivateKeyEntry" in _keytool(tmp_path / "keystore.p12", b"Correct-Horse-9")


def test_a_namespace_asking_for_public_roots_gets_the_extra_key_and_pods_name_it(
        cluster: ControlPlane, installed: Installation) -> None:
    make_namespace(cluster, installed.core, "public-roots", labels={PUBLIC: "true"})
    assert apply(cluster, _with(deployment("caller", "public-roots"), **{PUBLIC: "true"})).returncode == 0

    def bundle() -> Any:
        try:
            found = installed.core.read_namespaced_config_map("tls-injector-trust-bundle", "public-roots")
        except kubernetes.client.ApiException:  # not there yet
            return None
        return found if PUBLIC_KEY in (found.data or {}) else None

    stored = wait_until("the bundle with the public roots", bundle)
    assert stored.data[PUBLIC_KEY].startswith(stored.data["ca-bundle.crt"].rstrip("\n"))
    assert stored.data[PUBLIC_KEY].count("BEGIN CERTIFICATE") > 100
    assert stored.metadata.annotations["tls-injector.io/public-roots-source"] == f"certifi {certifi.__version__}"
    pod = wait_until("a pod of caller", lambda: next(iter(installed.core.list_namespaced_pod(
        "public-roots", label_selector="app=caller").items), None))
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["SSL_CERT_FILE"] == f"/etc/tls-injector/trust/{PUBLIC_KEY}"
    removed = cluster.kubectl("label", "namespace", "public-roots", f"{PUBLIC}-", "--dry-run=server", check=False)
    assert removed.returncode != 0
    assert "can be added in place, but not removed" in " ".join(removed.stderr.split())
