"""Builders and checks shared by the reconciler's tests against the API emulator."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.kubeapi import Emulator
from tls_injector.kube import KubeApi
from tls_injector.pki import bundle_certificates, load_certificates, verify_server
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

OWN_NS = "tls-injector"
START = datetime(2026, 1, 1, tzinfo=UTC)
INJECT = "tls-injector.io/inject"


class Clock:
    """A clock the test moves by hand, shared by every reconciler of a test."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def namespace(emu: Emulator, name: str, *, enabled: bool = False) -> None:
    """A namespace as a cluster has it a moment after it is made: with its `default` ServiceAccount,
    which kube-controller-manager's serviceaccounts controller creates in every namespace."""
    labels = {INJECT: "enabled"} if enabled else {}
    emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    service_account(emu, "default", name)


def service_account(emu: Emulator, name: str, ns: str) -> None:
    if not any(a["metadata"]["name"] == name for a in emu.objects("serviceaccounts", ns)):
        emu.add({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})


def deployment(emu: Emulator, name: str, ns: str, *, labels: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None, kind: str = "Deployment") -> dict[str, Any]:
    pod_labels = {"app": name, **({INJECT: "true"} if labels is None else labels)}
    return emu.add({
        "apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": name}}, **({"serviceName": name} if kind == "StatefulSet" else {}),
                 "template": {"metadata": {"labels": pod_labels, "annotations": annotations or {}},
                              "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}},
    })


def small_cluster(emu: Emulator, *, namespaces: int = 2, per_namespace: int = 2) -> list[tuple[str, str]]:
    """`namespaces` namespaces with `per_namespace` opted-in Deployments each; returns (ns, secret) pairs."""
    namespace(emu, OWN_NS)
    secrets = []
    for n in range(namespaces):
        namespace(emu, f"ns{n}")
        for w in range(per_namespace):
            deployment(emu, f"app{w}", f"ns{n}")
            secrets.append((f"ns{n}", f"app{w}-tls"))
    return secrets


def reconciler(emu: Emulator, clock: Clock, *, may_write: Callable[[], bool] = lambda: True,
               settle: timedelta = timedelta(minutes=5), metrics: ReconcileMetrics | None = None,
               **settings: Any) -> Reconciler:
    policy = CaPolicy(settle=settle)
    return Reconciler(KubeApi(emu.api_client()), ReconcileSettings(namespace=OWN_NS, ca=policy, **settings),
                      metrics=metrics, may_write=may_write, clock=clock)


def data(obj: dict[str, Any] | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in ((obj or {}).get("data") or {}).items()}


def ca_fingerprints(emu: Emulator) -> set[str]:
    ca = emu.get("secrets", "tls-injector-ca", OWN_NS)
    return {k.split(".")[0] for k in data(ca) if k.endswith(".crt")}


def assert_every_leaf_trusted_by_every_bundle(emu: Emulator, now: datetime) -> int:
    """The invariant of a safe rotation: every served leaf verifies, as a TLS client would verify it,
    against the bundle of every namespace (a client anywhere may call a server anywhere). Returns the
    number of leaves checked."""
    bundles = [bundle_certificates(cm.get("data") or {}) for cm in emu.objects("configmaps")
               if cm["metadata"]["name"] == "tls-injector-trust-bundle"]
    assert bundles, "no trust bundle anywhere"
    checked = 0
    for secret in emu.objects("secrets"):
        if (secret["metadata"].get("labels") or {}).get("tls-injector.io/role") != "leaf":
            continue
        chain = load_certificates(data(secret)["tls.crt"])
        name = f"{secret['metadata']['name'].removesuffix('-tls')}.{secret['metadata']['namespace']}.svc"
        for trusted in bundles:
            verify_server(chain[0], chain[1:], trusted=trusted, dns_name=name, now=now)
        checked += 1
    return checked
