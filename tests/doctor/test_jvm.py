"""The doctor's keystore and public-roots checks (issue 39 points 4 and 5): a keystore asked for and not
written (or holding another certificate) fails, one the reconciler wrote passes; a namespace asking for
public roots passes with the certifi release named, and fails while its bundle lacks them."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import certifi
import pytest

from tests.doctor.cluster import healthy_cluster, line, run
from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, deployment, namespace, reconciler

KEYSTORES = "every JVM keystore asked for is in its Secret and holds its certificate"
PUBLIC = "every namespace asking for public roots has them in its trust bundle"


def test_the_doctor_fails_until_the_keystore_is_written_and_again_when_it_holds_another_key(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        namespace(kubeapi, "jvm")
        deployment(kubeapi, "billing", "jvm")
        reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
        stored = kubeapi.get("deployments", "billing", "jvm")
        assert stored is not None
        stored["spec"]["template"]["metadata"]["annotations"] = {"tls-injector.io/keystore": "pkcs12"}
        kubeapi.store.update(kubeapi.resource("deployments"), "jvm", "billing", stored)
        code, out = run(cluster.doctor(), capsys)
        assert code == 1
        assert line(out, KEYSTORES).startswith("✖")
        assert "jvm/billing-tls (Deployment/billing): no keystore.p12 and truststore.p12" in out
        reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
        code, out = run(cluster.doctor(), capsys)
        assert line(out, KEYSTORES).startswith("✔"), out
        secret = kubeapi.get("secrets", "billing-tls", "jvm")
        assert secret is not None
        secret["data"]["keystore.password"] = base64.b64encode(b"another-password").decode()
        kubeapi.store.update(kubeapi.resource("secrets"), "jvm", "billing-tls", secret)
        code, out = run(cluster.doctor(), capsys)
        assert line(out, KEYSTORES).startswith("✖")
        assert "does not open with keystore.password" in out


def test_the_doctor_names_the_certifi_release_of_the_public_roots_and_fails_where_they_are_missing(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        namespace(kubeapi, "web")
        deployment(kubeapi, "caller", "web", annotations={"tls-injector.io/public-roots": "true"})
        reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
        code, out = run(cluster.doctor(), capsys)
        assert line(out, PUBLIC).startswith("✔"), out
        assert f"1 namespaces, certifi {certifi.__version__}" in line(out, PUBLIC)
        bundle = kubeapi.get("configmaps", "tls-injector-trust-bundle", "web")
        assert bundle is not None
        del bundle["data"]["ca-bundle-with-public-roots.pem"]
        kubeapi.store.update(kubeapi.resource("configmaps"), "web", "tls-injector-trust-bundle", bundle)
        code, out = run(cluster.doctor(), capsys)
        assert code == 1
        assert line(out, PUBLIC).startswith("✖")
