"""The doctor on a broken cluster, one breakage at a time: that check fails with its hint, exit status 1.

Every cluster starts healthy (tests/doctor/cluster.py builds it through the real reconciler, server and
webhook) and is then broken the way it breaks in life: behind the reconciler's back.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from tests.doctor.cluster import SERVICE_DNS, Cluster, admit, block, healthy_cluster, line, pod_of, run
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS
from tests.support.server import running_server
from tls_injector.pki import CaSet, CaState, encode, issue_leaf, make_ca
from tls_injector.pki.trust import CaRecord


@pytest.fixture
def cluster(kubeapi: Emulator, tmp_path: Path) -> Iterator[Cluster]:
    with healthy_cluster(kubeapi, tmp_path) as built:
        yield built


def doctor(cluster: Cluster, capsys: pytest.CaptureFixture[str], *extra: str, address: bool = True) -> str:
    code, out = run(cluster.doctor(*extra, address=address), capsys)
    assert code == 1, out
    return out


def failed(out: str, title: str) -> str:
    """The block of the check titled `title`, asserting it failed and says what to do."""
    assert line(out, title).startswith("✖"), out
    found = block(out, title)
    assert "hint: " in found
    return found


def _foreign_leaf(cluster: Cluster, dns_names: list[str]) -> tuple[bytes, bytes]:
    stranger = make_ca(common_name="someone else's CA", now=cluster.now)
    leaf = issue_leaf(issuer=stranger, dns_names=dns_names, now=cluster.now)
    return leaf.cert_pem, leaf.key_pem


def test_a_webhook_serving_a_certificate_from_another_ca_fails_the_served_check(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = _foreign_leaf(cluster, [SERVICE_DNS])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "tls.crt").write_bytes(cert)
    (tmp_path / "other" / "tls.key").write_bytes(key)
    with running_server(tmp_path / "other", cert_file=tmp_path / "other" / "tls.crt",
                        key_file=tmp_path / "other" / "tls.key") as server:
        port = server.url.rpartition(":")[2]
        out = doctor(cluster, capsys, "--webhook-address", f"127.0.0.1:{port}", address=False)
    found = failed(out, "every caBundle trusts the certificate the webhook serves")
    assert ("MutatingWebhookConfiguration tls-injector entry namespace-opt-in.pods.tls-injector.io: its caBundle does "
            f"not hold the issuer of the certificate for {SERVICE_DNS} (issued by CN=someone else's CA; caBundle "
            "holds CN=tls-injector webhook CA)") in found
    assert "rollout restart deployment/tls-injector" in found
    assert "break glass" in found
    # The Secret itself is still right: the check that reads it passes, which points at the pods.
    assert line(out, "every caBundle trusts the serving certificate Secret").startswith("✔")


def test_a_caBundle_that_does_not_trust_the_serving_secret_fails_both_webhook_checks(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    config = cluster.emu.get("validatingwebhookconfigurations", "tls-injector")
    assert config is not None
    stranger = make_ca(common_name="someone else's CA", now=cluster.now)
    config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(stranger.cert_pem).decode()
    cluster.replace("validatingwebhookconfigurations.admissionregistration.k8s.io", None, "tls-injector", config)
    out = doctor(cluster, capsys)
    assert "ValidatingWebhookConfiguration tls-injector entry" in failed(
        out, "every caBundle trusts the serving certificate Secret")
    assert "tls-injector bootstrap" in block(out, "every caBundle trusts the serving certificate Secret")
    failed(out, "every caBundle trusts the certificate the webhook serves")


def test_missing_webhook_configurations_fail(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.delete("mutatingwebhookconfigurations.admissionregistration.k8s.io", None, "tls-injector")
    out = doctor(cluster, capsys)
    found = failed(out, "the webhook configurations exist")
    assert "missing: MutatingWebhookConfiguration tls-injector" in found
    assert "kubectl apply -k" in found


def test_an_unreachable_webhook_without_an_address_is_a_warning_that_says_how_to_reach_it(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(cluster.doctor(address=False), capsys)
    assert code == 0, out  # a warning: nothing is known to be wrong
    assert out.rstrip().endswith("Status check results are ✔ with 1 warning")
    found = block(out, "every caBundle trusts the certificate the webhook serves")
    assert found.startswith("⚠")
    assert f"{SERVICE_DNS}:443" in found
    assert "port-forward svc/tls-injector 8443:443" in found
    assert "--webhook-address 127.0.0.1:8443" in found


def test_an_expired_ca_fails_the_expiry_check(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    old = make_ca(common_name="tls-injector CA", now=cluster.now - timedelta(days=400))
    cas = CaSet((CaRecord(old.cert, old.key, CaState.TRUSTED_USED, cluster.now - timedelta(days=400)),))
    secret = cluster.emu.get("secrets", "tls-injector-ca", OWN_NS)
    assert secret is not None
    secret["data"] = {k: base64.b64encode(v).decode() for k, v in encode(cas).items()}
    cluster.replace("secrets", OWN_NS, "tls-injector-ca", secret)
    out = doctor(cluster, capsys)
    found = failed(out, "the workload CA is not expiring")
    assert "expired" in found
    assert "force-replace" in found
    assert line(out, "the webhook CA is not expiring").startswith("✔")


def test_a_missing_ca_secret_fails(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.delete("secrets", OWN_NS, "tls-injector-webhook-ca")
    out = doctor(cluster, capsys)
    assert "does not exist" in failed(out, "the webhook CA Secret holds a usable CA set")


def test_a_missing_certificate_secret_fails_and_so_do_the_pods_mounting_it(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.delete("secrets", "shop", "web-tls")
    out = doctor(cluster, capsys)
    assert "shop/web-tls (Deployment/web): the Secret does not exist" in failed(
        out, "every opted-in workload has its certificate Secret")
    found = failed(out, "pods mount only certificate Secrets and bundles that exist")
    assert "Secret web-tls does not exist" in found
    assert "(Deployment/web)" in found


def test_a_missing_trust_bundle_fails_the_bundle_check_and_the_pods_mounting_it(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.delete("configmaps", "plain", "tls-injector-trust-bundle")
    out = doctor(cluster, capsys)
    assert "plain/api-tls (Deployment/api): no tls-injector-trust-bundle ConfigMap in plain" in failed(
        out, "every certificate verifies against its namespace's trust bundle")
    assert "(Deployment/api): ConfigMap tls-injector-trust-bundle does not exist" in failed(
        out, "pods mount only certificate Secrets and bundles that exist")


def test_a_certificate_from_another_ca_fails_the_bundle_check(cluster: Cluster,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    secret = cluster.emu.get("secrets", "web-tls", "shop")
    assert secret is not None
    cert, key = _foreign_leaf(cluster, ["web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local"])
    secret["data"]["tls.crt"] = base64.b64encode(cert).decode()
    secret["data"]["tls.key"] = base64.b64encode(key).decode()
    cluster.replace("secrets", "shop", "web-tls", secret)
    out = doctor(cluster, capsys)
    found = failed(out, "every certificate verifies against its namespace's trust bundle")
    assert "shop/web-tls (Deployment/web)" in found
    assert "kubectl -n shop annotate secret web-tls tls-injector.io/force-renew=now" in found
    assert line(out, "every certificate covers its workload's Service names").startswith("✔")


def test_a_certificate_missing_a_service_name_fails_the_names_check(cluster: Cluster,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # The workload now answers under a second Service name too; the reconciler has not run since.
    deployment = cluster.emu.get("deployments.apps", "api", "plain")
    assert deployment is not None
    deployment["spec"]["template"]["metadata"]["annotations"] = {"tls-injector.io/service-names": "api,api-admin"}
    cluster.replace("deployments.apps", "plain", "api", deployment)
    out = doctor(cluster, capsys)
    found = failed(out, "every certificate covers its workload's Service names")
    assert "plain/api-tls (Deployment/api): no SAN for api-admin.plain.svc, api-admin.plain.svc.cluster.local" in found


def test_a_pod_created_while_the_webhook_was_down_fails_with_a_restart_hint(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    missed = cluster.emu.add(pod_of(cluster.emu, "web", "shop"))  # stored without passing the webhook
    out = doctor(cluster, capsys)
    found = failed(out, "opted-in pods carry the injection")
    assert f"shop/{missed['metadata']['name']} (Deployment/web)" in found
    assert "kubectl -n shop rollout restart deployment/web" in found


def test_a_pod_mounting_a_secret_that_does_not_exist_fails(cluster: Cluster,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    pod = pod_of(cluster.emu, "web", "shop")
    pod["metadata"]["annotations"]["tls-injector.io/secret-name"] = "gone-tls"
    stored = admit(cluster.emu, cluster.webhook_address, pod)  # injected, for a Secret nobody issued
    out = doctor(cluster, capsys)
    found = failed(out, "pods mount only certificate Secrets and bundles that exist")
    assert f"shop/{stored['metadata']['name']} (Deployment/web): Secret gone-tls does not exist" in found


def test_rbac_without_a_verb_the_reconciler_uses_fails(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    role = cluster.emu.get("clusterroles.rbac.authorization.k8s.io", "tls-injector-reconciler")
    assert role is not None
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["events"]]
    cluster.replace("clusterroles.rbac.authorization.k8s.io", None, "tls-injector-reconciler", role)
    out = doctor(cluster, capsys)
    found = failed(out, "the reconciler's service account tls-injector/tls-injector-reconciler may make its calls")
    assert "calls would be refused" in found
    assert found.splitlines()[1].strip() == "create events cluster-wide"  # the one refused call, and only it
    assert "manifests/base/rbac.yaml" in found


def test_a_stale_lease_fails(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    lease = cluster.emu.get("leases.coordination.k8s.io", "tls-injector-leader", OWN_NS)
    assert lease is not None
    lease["spec"]["renewTime"] = (cluster.now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.replace("leases.coordination.k8s.io", OWN_NS, "tls-injector-leader", lease)
    out = doctor(cluster, capsys)
    found = failed(out, "a reconciler holds the leader Lease")
    assert "held by tls-injector-reconciler-0_1, but last renewed 5 min ago (the lease lasts 15 s)" in found
    assert "get deployment tls-injector-reconciler" in found


def test_json_output_parses_and_carries_every_check(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.delete("secrets", "shop", "web-tls")
    report = orjson.loads(doctor(cluster, capsys, "-o", "json"))
    assert report["ok"] is False
    assert report["summary"]["error"] == 2
    by_title = {c["title"]: c for c in report["checks"]}
    missing = by_title["every opted-in workload has its certificate Secret"]
    assert missing["status"] == "error"
    assert missing["hint"]
    assert missing["details"] == ["shop/web-tls (Deployment/web): the Secret does not exist"]
    assert by_title["a reconciler holds the leader Lease"]["status"] == "ok"


def test_a_workload_asking_for_another_namespaces_name_fails_the_names_accepted_check(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = cluster.emu.get("deployments.apps", "api", "plain")
    assert deployment is not None
    deployment["spec"]["template"]["metadata"]["annotations"] = {
        "tls-injector.io/service-names": "api,victim.team-b.svc,example.com"}
    cluster.replace("deployments.apps", "plain", "api", deployment)
    found = failed(doctor(cluster, capsys), "every Service name asked for may be issued")
    assert "plain/api-tls (Deployment/api): 'example.com' (has dots" in found
    assert "'victim.team-b.svc'" in found


def test_a_squatted_trust_bundle_name_fails_the_bundle_check(cluster: Cluster,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    bundle = cluster.emu.get("configmaps", "tls-injector-trust-bundle", "plain")
    assert bundle is not None
    bundle["metadata"]["labels"] = {}  # taken over: no longer ours
    cluster.replace("configmaps", "plain", "tls-injector-trust-bundle", bundle)
    found = failed(doctor(cluster, capsys), "every namespace that needs the trust bundle can get it")
    assert "plain" in found
    assert "CA rotation goes on without them" in found


def test_a_service_selecting_opted_in_pods_that_the_certificate_does_not_name_fails_the_names_check(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """A Service added since the last pass: the names check lists it (the reconciler adds it next pass)."""
    cluster.emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api-public", "namespace": "plain"},
                     "spec": {"selector": {"app": "api"}, "ports": [{"port": 443}]}})
    found = failed(doctor(cluster, capsys), "every certificate covers its workload's Service names")
    assert "plain/api-tls (Deployment/api): no SAN for api-public.plain.svc" in found
