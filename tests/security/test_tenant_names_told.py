"""Where a workload's author looks, a name that is none is told before the reconciler refuses it
(docs/security.md, "Names a tenant writes"): the /mutate warning and the dry-run preview, `inject`, and
`doctor`. The reconciler's own Events are tested in tests/security/test_tenant_names.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.doctor.cluster import healthy_cluster, line, run
from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, deployment, namespace, reconciler
from tests.support.reviews import answer, review
from tls_injector.cli import main
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.injection.preview import what_pods_get

KEYSTORE, PASSWORD = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
HOSTILE = "../../../secrets"
SAID = "tls-injector.io/keystore-password-secret: '../../../secrets' is no Secret name"


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "annotations": annotations,
                         "labels": {"tls-injector.io/inject": "true"}},
            "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}


def test_mutate_warns_of_a_password_secret_that_is_no_name_and_still_injects() -> None:
    response = answer(make_mutate_handler(InjectionOptions()),
                      review(obj=_pod({KEYSTORE: "pkcs12", PASSWORD: HOSTILE}), namespace="shop"))
    assert response["allowed"]
    assert "patch" in response  # the certificate is mounted all the same
    assert any(w.startswith(SAID) for w in response.get("warnings") or []), response


def test_the_dry_run_preview_says_no_keystore_is_written_for_it() -> None:
    template = _pod({KEYSTORE: "pkcs12", PASSWORD: HOSTILE})["metadata"]
    said = what_pods_get("Deployment", "web", template, InjectionOptions())
    assert any(SAID in line for line in said), said
    assert not any("and a JVM keystore" in line for line in said)


def test_inject_warns_of_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "web.yaml"
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
                  "spec": {"selector": {"matchLabels": {"app": "web"}},
                           "template": {**_pod({KEYSTORE: "pkcs12", PASSWORD: HOSTILE}), "kind": None}}}
    del deployment["spec"]["template"]["kind"], deployment["spec"]["template"]["apiVersion"]
    manifest.write_text(yaml.safe_dump(deployment))
    assert main(["inject", "-f", str(manifest)]) == 0
    out, err = capsys.readouterr()
    assert SAID in out + err


def test_doctor_fails_on_a_secret_name_or_a_password_secret_that_is_none(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        namespace(kubeapi, "jvm")
        deployment(kubeapi, "named", "jvm", annotations={"tls-injector.io/secret-name": "../../kube-system/secrets/x"})
        deployment(kubeapi, "billing", "jvm", annotations={KEYSTORE: "pkcs12", PASSWORD: HOSTILE})
        reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
        kubeapi.reset_log()
        code, out = run(cluster.doctor(), capsys)
        assert code == 1
        assert line(out, "every workload's Secret name is a Secret name").startswith("✖")
        assert "Deployment/named: not issued, no Secret name" in out
        assert line(out, "every JVM keystore asked for is in its Secret and holds its certificate").startswith("✖")
        assert "jvm/billing-tls (Deployment/billing): tls-injector.io/keystore-password-secret '../../../secrets' is " \
               "no Secret name" in out
        # The doctor read nothing under either value.
        assert [r for r in kubeapi.log if r.namespace == "kube-system" or (r.name and ".." in r.name)] == []
