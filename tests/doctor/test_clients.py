"""The doctor on client certificates (docs/mtls.md): a healthy cluster with a workload that asks for one
passes, then each breakage of the client CA or the client leaf fails (or warns) with its hint.

The cluster is tests/doctor/cluster.py's healthy one plus Deployment `caller` in `plain` asking for a client
certificate, issued by a real reconcile pass and admitted through the real /mutate over HTTPS.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from tests.doctor.cluster import Cluster, admit, block, healthy_cluster, line, pod_of, reconcile, run
from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, deployment
from tls_injector.pki import CertKey, issue_client, issue_leaf, make_ca
from tls_injector.reconcile.ca.machine import load_ca_set

CLIENT = "tls-injector.io/client-certificate"
IDENTITY = "spiffe://cluster.local/ns/plain/sa/default"
CA_TITLE = "the client CA Secret holds a usable CA set"
LEAF_TITLE = "every client certificate is issued, clientAuth only, and verifies against its namespace's client CAs"
MODE_TITLE = "no workload asks for a client certificate in the pod-certificate mode"


@contextmanager
def with_caller(emu: Emulator, tmp_path: Path) -> Iterator[Cluster]:
    with healthy_cluster(emu, tmp_path) as cluster:
        deployment(emu, "caller", "plain", annotations={CLIENT: "true"})
        reconcile(emu, cluster.now)
        admit(emu, cluster.webhook_address, pod_of(emu, "caller", "plain"))
        yield cluster


@pytest.fixture
def cluster(kubeapi: Emulator, tmp_path: Path) -> Iterator[Cluster]:
    with with_caller(kubeapi, tmp_path) as built:
        yield built


def _put_leaf(cluster: Cluster, leaf: CertKey) -> None:
    secret = cluster.emu.get("secrets", "caller-client-tls", "plain")
    assert secret is not None
    secret["data"]["tls.crt"] = base64.b64encode(leaf.chain_pem).decode()
    secret["data"]["tls.key"] = base64.b64encode(leaf.key_pem).decode()
    cluster.replace("secrets", "plain", "caller-client-tls", secret)


def _client_ca(cluster: Cluster) -> CertKey:
    signer = load_ca_set(cluster.emu.get("secrets", "tls-injector-client-ca", OWN_NS)).signer()
    assert signer is not None
    return signer


def failed(out: str, title: str) -> str:
    assert line(out, title).startswith("✖"), out
    found = block(out, title)
    assert "hint: " in found
    return found


def test_a_cluster_with_a_client_certificate_passes_and_says_so(cluster: Cluster,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(cluster.doctor(), capsys)
    assert code == 0, out
    assert line(out, CA_TITLE) == f"✔ {CA_TITLE}: 1 CA, no rotation"
    assert line(out, "the client CA is not expiring").startswith("✔ the client CA is not expiring: signer expires")
    assert line(out, LEAF_TITLE) == f"✔ {LEAF_TITLE}: 1 client certificates"
    assert line(out, MODE_TITLE).startswith("✔")
    assert "⚠" not in out


def test_without_a_workload_asking_the_missing_client_ca_is_fine(kubeapi: Emulator, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        code, out = run(cluster.doctor(), capsys)
    assert code == 0, out
    assert "not needed: no workload asks for a client certificate" in line(out, CA_TITLE)
    assert line(out, LEAF_TITLE) == f"✔ {LEAF_TITLE}: 0 client certificates"


def test_a_missing_client_ca_fails_its_check(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.delete("secrets", OWN_NS, "tls-injector-client-ca")
    code, out = run(cluster.doctor(), capsys)
    assert code == 1
    assert "Secret tls-injector/tls-injector-client-ca does not exist" in failed(out, CA_TITLE)
    assert line(out, "the workload CA Secret holds a usable CA set").startswith("✔")  # the serving CA is apart


def test_a_missing_client_secret_fails_the_leaf_check_and_the_pod_mount_check(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.delete("secrets", "plain", "caller-client-tls")
    code, out = run(cluster.doctor(), capsys)
    assert code == 1
    assert "plain/caller-client-tls (Deployment/caller): the Secret does not exist" in failed(out, LEAF_TITLE)
    mounts = failed(out, "pods mount only certificate Secrets and bundles that exist")
    assert "Secret caller-client-tls does not exist" in mounts
    assert line(out, "every opted-in workload has its certificate Secret").startswith("✔")  # serving: fine


def test_a_serving_certificate_in_the_client_secret_fails_on_its_usage(cluster: Cluster,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _put_leaf(cluster, issue_leaf(issuer=_client_ca(cluster), dns_names=["caller.plain.svc"], now=cluster.now))
    code, out = run(cluster.doctor(), capsys)
    assert code == 1
    found = failed(out, LEAF_TITLE)
    assert "its extended key usage is serverAuth, not clientAuth only" in found
    assert "kubectl -n plain annotate secret caller-client-tls tls-injector.io/force-renew=now" in found


def test_a_client_certificate_from_another_ca_fails_as_servers_would_refuse_it(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    stranger = make_ca(common_name="someone else's CA", now=cluster.now)
    _put_leaf(cluster, issue_client(stranger, uris=[IDENTITY], now=cluster.now))
    code, out = run(cluster.doctor(), capsys)
    assert code == 1
    assert "servers verifying with client-ca-bundle.crt refuse it" in failed(out, LEAF_TITLE)


def test_a_client_certificate_naming_another_identity_fails(cluster: Cluster,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    other = "spiffe://cluster.local/ns/plain/sa/someone-else"
    _put_leaf(cluster, issue_client(_client_ca(cluster), uris=[other], now=cluster.now))
    code, out = run(cluster.doctor(), capsys)
    assert code == 1
    assert f"it names {other}, not {IDENTITY}" in failed(out, LEAF_TITLE)


def test_a_client_certificate_past_its_renewal_warns(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    _put_leaf(cluster, issue_client(_client_ca(cluster), uris=[IDENTITY], now=cluster.now - timedelta(days=80)))
    code, out = run(cluster.doctor(), capsys)
    assert code == 0, out  # still valid: a warning, not a failure
    assert line(out, LEAF_TITLE).startswith(f"⚠ {LEAF_TITLE}: 1 of 1 past their renewal")
    assert "it expires in 9 days and was due for renewal 35 days before its end" in block(out, LEAF_TITLE)


def test_workloads_of_different_service_accounts_sharing_a_client_secret_fail(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    other = deployment(cluster.emu, "caller-2", "plain", annotations={CLIENT: "true",
                                                                      "tls-injector.io/secret-name": "caller-tls"})
    other["spec"]["template"]["spec"]["serviceAccountName"] = "robot"
    cluster.replace("deployments.apps", "plain", "caller-2", other)
    code, out = run(cluster.doctor(), capsys)
    assert code == 1
    assert "run as different service accounts" in failed(out, LEAF_TITLE)


def test_a_client_certificate_asked_for_in_the_pod_certificate_mode_fails_where_pod_certificates_are_served(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_emulator(seed=0, certificates=("v1",)) as emu, with_caller(emu, tmp_path) as cluster:
        deployment(emu, "edge", "plain", annotations={CLIENT: "true", "tls-injector.io/mode": "pod-certificate"})
        code, out = run(cluster.doctor(), capsys)
    assert code == 1
    found = failed(out, MODE_TITLE)
    assert "plain/edge (Deployment)" in found
    assert 'tls-injector.io/mode: "secret"' in found
