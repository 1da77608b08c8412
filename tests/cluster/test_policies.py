"""The exported ValidatingAdmissionPolicies enforce the transition rule on the real apiserver without
our webhook: with the webhook stopped, under failurePolicy Ignore (the rule still holds, by the
policy alone) and Fail (the rule holds by the policy; everything else the webhook would judge is
refused, as Fail promises)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import kubernetes.client
import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import ROOT, Installation, wait_until
from tests.cluster.test_mission import DISABLE_MESSAGE, apply, deployment, make_namespace

POLICY = "tls-injector.workload-tls-transition"


def exported_policies() -> str:
    done = subprocess.run([sys.executable, "-m", "tls_injector", "export-policy"], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    return done.stdout


@pytest.fixture
def policies_without_webhook(
    cluster: ControlPlane, installed: Installation, admin: kubernetes.client.ApiClient
) -> Iterator[kubernetes.client.AdmissionregistrationV1Api]:
    """The exported policies applied and the webhook stopped; afterwards, all as it was."""
    api = kubernetes.client.AdmissionregistrationV1Api(admin)
    before = [w.failure_policy for w in api.read_validating_webhook_configuration("tls-injector").webhooks]
    policies = exported_policies()
    cluster.kubectl("apply", "-f", "-", stdin=policies)
    installed.stop("webhook")
    try:
        yield api
    finally:
        set_failure_policy(api, before)
        cluster.kubectl("delete", "-f", "-", stdin=policies)
        installed.start_webhook()


def set_failure_policy(api: kubernetes.client.AdmissionregistrationV1Api, policies: list[str]) -> None:
    patch = [{"op": "replace", "path": f"/webhooks/{i}/failurePolicy", "value": p} for i, p in enumerate(policies)]
    api.patch_validating_webhook_configuration("tls-injector", patch)


@pytest.mark.parametrize("failure_policy", ["Ignore", "Fail"])
def test_the_exported_policies_refuse_turning_tls_off_with_the_webhook_stopped(
    cluster: ControlPlane, installed: Installation, failure_policy: str,
    policies_without_webhook: kubernetes.client.AdmissionregistrationV1Api,
) -> None:
    api = policies_without_webhook
    namespace = f"policy-only-{failure_policy.lower()}"
    make_namespace(cluster, installed.core, namespace)
    # Created while the webhook is down: a CREATE is not judged by /validate's Deployment entries
    # (the apiserver sends only UPDATEs and dry-run CREATEs there), so Fail does not refuse it.
    assert apply(cluster, deployment("api", namespace, secret="api-tls")).returncode == 0
    count = len(api.read_validating_webhook_configuration("tls-injector").webhooks)
    set_failure_policy(api, [failure_policy] * count)

    def refused_by_the_policy() -> str | None:
        answer = apply(cluster, deployment("api", namespace, tls=False), "--dry-run=server")
        return answer.stderr if answer.returncode != 0 and POLICY in answer.stderr else None

    refusal = wait_until("the policy to be enforced", refused_by_the_policy, timeout=60)
    assert DISABLE_MESSAGE in " ".join(refusal.split())
    innocent = apply(cluster, deployment("api", namespace, secret="api-tls", replicas=3), "--dry-run=server")
    if failure_policy == "Ignore":
        assert innocent.returncode == 0, innocent.stderr
    else:
        assert innocent.returncode != 0
        assert "failed calling webhook" in innocent.stderr
