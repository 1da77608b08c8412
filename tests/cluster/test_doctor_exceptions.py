"""`tls-injector doctor` as a user runs it, on the real apiserver: a Deployment of the webhook granting TLS
exceptions (`--tls-exceptions=policy`, as the admission-policy component patches it in) is healthy with the
exported policies installed, and a failed check naming what is missing once a binding is deleted: the
hole a `kubectl delete` or an overlay that parted the two would open (docs/rules.md, "Exceptions").

The Deployment has no replicas (this tier has no node); doctor judges its pod template's arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.test_policies import exported_policies

ROOT = Path(__file__).resolve().parents[2]
NS = "doctor-exceptions"
TITLE = "TLS exceptions are granted only with the admission policies that check RBAC"
BINDING = "tls-injector.workload-tls-transition"


def webhook_deployment(args: list[str]) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "tls-injector"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "tls-injector", "namespace": NS},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "webhook", "image": "tls-injector:0", "args": args}]}}}}


def doctor_check(cluster: ControlPlane) -> dict[str, Any]:
    argv = ["doctor", "--kubeconfig", str(cluster.admin_kubeconfig), "--namespace", NS, "-o", "json"]
    done = subprocess.run([sys.executable, "-m", "tls_injector", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr  # 1: this bare namespace fails other checks; the report is there
    [found] = [c for c in json.loads(done.stdout)["checks"] if c["title"] == TITLE]
    return dict(found)


@pytest.fixture
def namespace(cluster: ControlPlane) -> Any:
    cluster.kubectl("create", "namespace", NS)
    policies = exported_policies()
    existed = cluster.kubectl("get", "validatingadmissionpolicybinding", BINDING, check=False).returncode == 0
    try:
        yield policies
    finally:
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if existed:
            cluster.kubectl("apply", "-f", "-", stdin=policies)
        else:
            cluster.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=policies)


def test_doctor_fails_a_webhook_granting_exceptions_without_the_policies(cluster: ControlPlane, namespace: str) -> None:
    policies = namespace
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(webhook_deployment(["serve"])))
    assert doctor_check(cluster)["status"] == "ok"  # grants none: nothing required

    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(webhook_deployment(["serve", "--tls-exceptions=policy"])))
    cluster.kubectl("apply", "-f", "-", stdin=policies)
    healthy = doctor_check(cluster)
    assert healthy["status"] == "ok", healthy
    assert f"{NS}/tls-injector run with --tls-exceptions policy" in healthy["message"]

    cluster.kubectl("delete", "validatingadmissionpolicybinding", BINDING)
    broken = doctor_check(cluster)
    assert broken["status"] == "error", broken
    assert f"ValidatingAdmissionPolicyBinding {BINDING} is not installed: the policy is never evaluated" in \
        broken["details"]
    assert "can turn its TLS off" in broken["message"]
