"""Every API call the reconciler makes is allowed by the RBAC that ships (manifests/base)."""

from __future__ import annotations

from datetime import timedelta

from tests.kubeapi import Emulator
from tests.kubeapi.resources import lookup_qualified
from tests.reconcile.cluster import OWN_NS, Clock, reconciler, small_cluster
from tests.reconcile.test_webhook_selfcare import install_webhooks
from tests.shipping.rbac import Call, authorized, grants_for
from tests.shipping.support import installed
from tls_injector.kube import KubeApi, LeaderElector
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings


def test_a_lifetime_of_reconciling_stays_within_the_shipped_roles(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=2, per_namespace=2)
    install_webhooks(kubeapi)
    clock = Clock()
    kubeapi.reset_log()
    elector = LeaderElector(KubeApi(kubeapi.api_client()), OWN_NS, "replica-1")
    assert elector.try_lead(clock())
    assert elector.try_lead(clock() + timedelta(seconds=2))
    webhook = WebhookSettings()
    assert reconciler(kubeapi, clock, webhook=webhook).run_pass().converged
    # Changes by "someone else", straight into the store so they are not in the request log: a workload
    # goes away (its Secret must be deleted) and both CAs are told to rotate.
    kubeapi.store.delete(lookup_qualified("deployments.apps"), "ns1", "app1")
    for name in ("tls-injector-ca", "tls-injector-webhook-ca"):
        ca = kubeapi.get("secrets", name, OWN_NS)
        assert ca is not None
        ca["metadata"]["annotations"] = {"tls-injector.io/force-replace": "now"}
        kubeapi.store.update(lookup_qualified("secrets"), OWN_NS, name, ca)
    for _ in range(6):
        clock.advance(timedelta(minutes=6))
        assert reconciler(kubeapi, clock, webhook=webhook).run_pass().converged
    calls = {(r.verb, r.resource, r.namespace, r.name) for r in kubeapi.log}
    assert {verb for verb, *_ in calls} == {"get", "list", "create", "update", "delete"}
    grants = grants_for(installed(), namespace="tls-injector", account="tls-injector-reconciler")
    assert {c for c in calls if not authorized(grants, Call.of(*c))} == set()
