"""A healthy emulated cluster, built the way a real one becomes healthy, and the doctor run against it.

The shipped manifests (RBAC, webhook configurations) are applied to the API emulator; a real reconcile
pass issues the CA, the certificates, the bundles and the webhook's serving Secret and caBundles; a real
`serve` on loopback serves that Secret; pods are created through that server's /mutate over HTTPS,
verified with the live caBundle as the API server would, and stored with the patch applied; a real
LeaderElector holds the Lease. The doctor then reads all of it through the official client.
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import orjson

from tests.kubeapi import Emulator
from tests.kubeapi.resources import lookup_qualified
from tests.reconcile.cluster import OWN_NS, data, deployment, namespace
from tests.shipping.support import ROOT, render
from tests.support.reviews import review
from tests.support.server import running_server
from tls_injector.cli import build_handlers, main
from tls_injector.kube import KubeApi, LeaderElector
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings
from tls_injector.settings import ServeSettings

SERVICE_DNS = "tls-injector.tls-injector.svc"
Obj = dict[str, Any]
_INSTALLED_KINDS = ("Namespace", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ClusterRole",
                    "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass
class Cluster:
    emu: Emulator
    webhook_address: str  # host:port of the running webhook server
    now: datetime

    def doctor(self, *extra: str, address: bool = True) -> list[str]:
        """The doctor's argv against this cluster (given to `main` by the tests)."""
        where = ["--webhook-address", self.webhook_address] if address else []
        return ["doctor", "--server", self.emu.url, "--namespace", OWN_NS, *where, *extra]

    def replace(self, qualified: str, namespace: str | None, name: str, obj: Obj) -> None:
        """Change an object behind everyone's back (straight into the store)."""
        self.emu.store.update(lookup_qualified(qualified), namespace, name, obj)

    def delete(self, qualified: str, namespace: str | None, name: str) -> None:
        self.emu.store.delete(lookup_qualified(qualified), namespace, name)


def install(emu: Emulator) -> None:
    """What `kubectl apply -k manifests/base` puts in place that the doctor looks at."""
    for obj in render(ROOT / "manifests" / "base"):
        exists = obj["kind"] == "Namespace" and emu.get("namespaces", obj["metadata"]["name"]) is not None
        if obj["kind"] in _INSTALLED_KINDS and not exists:
            emu.add(obj)


def workloads(emu: Emulator) -> None:
    """`shop` opted in as a namespace (Deployment web), `plain` not (Deployment api opts in by label)."""
    namespace(emu, "shop", enabled=True)
    namespace(emu, "plain")
    deployment(emu, "web", "shop", labels={})
    deployment(emu, "api", "plain")


def reconcile(emu: Emulator, now: datetime) -> None:
    settings = ReconcileSettings(namespace=OWN_NS, webhook=WebhookSettings())
    report = Reconciler(KubeApi(emu.api_client()), settings, clock=lambda: now).run_pass()
    assert report.converged, report


def lead(emu: Emulator, now: datetime) -> None:
    assert LeaderElector(KubeApi(emu.api_client()), OWN_NS, "tls-injector-reconciler-0_1").try_lead(now)


def serving_files(emu: Emulator, directory: Path) -> tuple[Path, Path]:
    """The serving Secret as the webhook pod sees it mounted."""
    secret = data(emu.get("secrets", "tls-injector-webhook-tls", OWN_NS))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(secret["tls.crt"])
    (directory / "tls.key").write_bytes(secret["tls.key"])
    return directory / "tls.crt", directory / "tls.key"


def ca_bundle(emu: Emulator) -> bytes:
    config = emu.get("mutatingwebhookconfigurations", "tls-injector")
    assert config is not None
    return base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])


def pod_of(emu: Emulator, name: str, ns: str) -> Obj:
    """The pod a ReplicaSet of Deployment `name` creates from its template."""
    template = emu.get("deployments.apps", name, ns)
    assert template is not None
    spec = template["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{name}-7d9f8b6c5-", "namespace": ns,
                         "labels": {**spec["metadata"]["labels"], "pod-template-hash": "7d9f8b6c5"},
                         "annotations": dict(spec["metadata"].get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "uid": "rs-uid",
                                              "name": f"{name}-7d9f8b6c5", "controller": True}]},
            "spec": spec["spec"]}


def admit(emu: Emulator, address: str, pod: Obj) -> Obj:
    """POST the pod's review to /mutate as the API server does (TLS verified with the live caBundle for the
    Service's name), apply the answer's patch, and store the pod."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cadata=ca_bundle(emu).decode())
    body = orjson.dumps(review(obj=pod, namespace=pod["metadata"]["namespace"]))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.sock = context.wrap_socket(raw, server_hostname=SERVICE_DNS)
        try:
            connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            answer = orjson.loads(connection.getresponse().read())["response"]
        finally:
            connection.close()
    assert answer["allowed"], answer
    if "patch" in answer:
        pod = jsonpatch.apply_patch(pod, orjson.loads(base64.b64decode(answer["patch"])))
    return emu.add(pod)


@contextmanager
def healthy_cluster(emu: Emulator, tmp_path: Path) -> Iterator[Cluster]:
    now = datetime.now(UTC)
    install(emu)
    workloads(emu)
    reconcile(emu, now)
    lead(emu, now)
    cert, key = serving_files(emu, tmp_path / "serving")
    mutate, validate = build_handlers(ServeSettings())
    with running_server(tmp_path, mutate=mutate, validate=validate, cert_file=cert, key_file=key,
                        ca_file=cert) as server:
        address = f"127.0.0.1:{server.url.rpartition(':')[2]}"
        for name, ns in (("web", "shop"), ("api", "plain")):
            admit(emu, address, pod_of(emu, name, ns))
        yield Cluster(emu, address, now)


def run(argv: list[str], capsys: Any) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def line(output: str, title: str) -> str:
    """The report line of the check titled `title` (with its symbol)."""
    found = [text for text in output.splitlines() if text[2:].startswith(title)]
    assert len(found) == 1, f"no single line for {title!r} in:\n{output}"
    return found[0]


def block(output: str, title: str) -> str:
    """The check's line with its details and hint."""
    lines = output.splitlines()
    start = next(i for i, text in enumerate(lines) if text[2:].startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[start:end])
