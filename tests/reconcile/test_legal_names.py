"""Issue 39, point 1: no legal workload is left waiting. Every name the apiserver accepts for every kind
that runs pods (tests/reconcile/legal_names.py: dots, leading digits, all digits, the longest) gets the
Secret its pods mount after one pass, and the pass converges: a name that is no Service name (`web.v2`,
`1web`, 64+ characters) is not a refusal, since the workload asked for nothing. Its certificate names the
Services of the namespace that select its pods, verified by a TLS client; with none, it names nothing, and
the workload is told so.

The first test holds the emulator's name validation to the table; run against a real apiserver, it holds
the table to the apiserver: `TLS_INJECTOR_TEST_KUBECONFIG=<kubeconfig> pytest tests/reconcile/test_legal_names.py
-k apiserver` (server-side dry-run creates in namespace `default`: nothing is stored; a bare apiserver without
the service account controller needs `default`'s ServiceAccount created for the Pod rows).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import kubernetes.client
import kubernetes.config
import pytest
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import Emulator
from tests.pki.tls import Party, handshake
from tests.reconcile.cluster import OWN_NS, Clock, data, namespace, reconciler
from tests.reconcile.legal_names import KINDS, illegal_names, legal_names
from tests.support.reviews import answer, review
from tests.support.workloads import INJECT, Obj, Shape, app_label, build, manifest
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.kube import (
    CRON_JOBS,
    DAEMON_SETS,
    DEPLOYMENTS,
    JOBS,
    PODS,
    REPLICA_SETS,
    STATEFUL_SETS,
    KubeApi,
    Resource,
)
from tls_injector.pki import bundle_certificates, dns_sans, load_certificates, verify_nameless, verify_server
from tls_injector.reconcile.loop.runner import summary

NS = "team-a"
KUBECONFIG_ENV = "TLS_INJECTOR_TEST_KUBECONFIG"
RESOURCES: dict[str, Resource] = {r.kind: r for r in (DEPLOYMENTS, STATEFUL_SETS, DAEMON_SETS, REPLICA_SETS, JOBS,
                                                      CRON_JOBS, PODS)}
MUTATE = make_mutate_handler(InjectionOptions())
CASES = [(kind, name) for kind in KINDS for name in legal_names(kind)]


def _id(case: tuple[str, str]) -> str:
    kind, name = case
    return f"{kind}-{name[:12]}-{len(name)}"


# The apiserver's own rules: the emulator by default, a real apiserver when a kubeconfig is given.

@pytest.fixture
def apiserver(kubeapi: Emulator) -> Iterator[kubernetes.client.ApiClient]:
    path = os.environ.get(KUBECONFIG_ENV)
    if not path:
        yield kubeapi.api_client()
        return
    client = kubernetes.config.new_client_from_config(config_file=path)
    try:
        yield client
    finally:
        client.close()


def _dry_run_create(client: kubernetes.client.ApiClient, obj: Obj) -> int:
    """The status of a server-side dry-run create in `default` (nothing is stored, on any server)."""
    apps, batch, core = (kubernetes.client.AppsV1Api(client), kubernetes.client.BatchV1Api(client),
                         kubernetes.client.CoreV1Api(client))
    create: dict[str, Callable[..., Any]] = {
        "Deployment": apps.create_namespaced_deployment, "StatefulSet": apps.create_namespaced_stateful_set,
        "DaemonSet": apps.create_namespaced_daemon_set, "ReplicaSet": apps.create_namespaced_replica_set,
        "Job": batch.create_namespaced_job, "CronJob": batch.create_namespaced_cron_job,
        "Pod": core.create_namespaced_pod}
    body = {**obj, "metadata": {**obj["metadata"], "namespace": "default"}}
    try:
        create[obj["kind"]]("default", body, dry_run="All", _preload_content=False)
    except ApiException as e:
        return int(e.status)
    return 201


def _manifest(kind: str, name: str) -> Obj:
    found = manifest(Shape(kind, name, {INJECT: "true"}, generate_name=False), NS)
    assert found is not None
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_the_apiserver_accepts_every_legal_name_and_refuses_the_first_names_past_the_rules(
        apiserver: kubernetes.client.ApiClient, kind: str) -> None:
    accepted = {name: _dry_run_create(apiserver, _manifest(kind, name)) for name in legal_names(kind)}
    refused = {name: _dry_run_create(apiserver, _manifest(kind, name)) for name in illegal_names(kind)}
    assert {n: code for n, code in accepted.items() if code != 201} == {}
    assert {n: code for n, code in refused.items() if code != 422} == {}


# The chain on the emulator: the pod's Secret as /mutate mounts it, issued by one pass.

def _mutated(obj: Obj, kind: tuple[str, str, str] = ("", "v1", "Pod")) -> Obj:
    response = answer(MUTATE, review(obj=obj, kind=kind, namespace=NS))
    assert response["allowed"], response
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    result: Obj = jsonpatch.apply_patch(obj, ops)
    return result


def _mounted_secret(pod: Obj) -> str:
    [secret] = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if v["name"] == "tls-injector-cert"]
    return str(secret)


def _run(emu: Emulator, kind: str, name: str) -> str:
    """The user's object stored through the official client (so the emulator's validation applies); for a
    bare pod, the pod after /mutate. Returns the Secret /mutate mounts in the workload's pods."""
    api = KubeApi(emu.api_client())
    shape = Shape(kind, name, {INJECT: "true"}, generate_name=False)
    made: list[Obj] = []

    def create(obj: Obj) -> Obj:  # the controllers' objects are not stored: only the user's must be legal
        stored = api.create(RESOURCES[obj["kind"]], obj, namespace=NS) if not made else obj
        made.append(stored)
        return {**stored, "metadata": {**stored["metadata"], "uid": stored["metadata"].get("uid") or "uid-1"}}

    pod = _mutated(build(shape, NS, create=create, admit_job=lambda job: _mutated(job, ("batch", "v1", "Job"))))
    if kind == "Pod":
        api.create(PODS, pod, namespace=NS)
    return _mounted_secret(pod)


def _service(emu: Emulator, name: str, workload: str) -> None:
    emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
             "spec": {"selector": {"app": app_label(Shape("Pod", workload))}, "ports": [{"port": 443}]}})


def _leaf_and_bundle(emu: Emulator, secret: str) -> tuple[dict[str, bytes], bytes]:
    stored = emu.get("secrets", secret, NS)
    assert stored is not None, f"no Secret {secret}: the pods would wait for ever"
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", NS)["data"]["ca-bundle.crt"].encode()
    return data(stored), bundle


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_legal_name_gets_the_secret_its_pods_mount_naming_the_services_that_select_them(
        kubeapi: Emulator, case: tuple[str, str]) -> None:
    kind, name = case
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    _service(kubeapi, "front", name)
    secret = _run(kubeapi, kind, name)
    report = reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    assert report.converged, summary(report)
    assert not report.names_refused
    assert not report.refused
    assert not report.nameless

    leaf, bundle = _leaf_and_bundle(kubeapi, secret)
    own = [name] if _service_name(name) else []
    expected = sorted(f"{s}.{NS}.svc{d}" for s in ["front", *own] for d in ("", ".cluster.local"))
    assert sorted(dns_sans(load_certificates(leaf["tls.crt"])[0])) == expected
    assert handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle,
                     hostname=f"front.{NS}.svc.cluster.local").startswith("TLSv1")


def _service_name(name: str) -> bool:
    """A legal workload name that is also a Service name: a DNS-1123 label (no dots, at most 63), a leading
    digit included since 1.37 (tests/cluster/test_control_plane.py shows the apiserver accepting `1web`)."""
    return "." not in name and len(name) <= 63


@pytest.mark.parametrize("case", [c for c in CASES if not _service_name(c[1])], ids=_id)
def test_a_legal_name_no_service_names_still_gets_its_secret_and_the_workload_is_told(
        kubeapi: Emulator, case: tuple[str, str]) -> None:
    kind, name = case
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    secret = _run(kubeapi, kind, name)
    clock = Clock(datetime.now(UTC))
    rec = reconciler(kubeapi, clock)
    report = rec.run_pass()
    assert report.converged, summary(report)
    assert not report.names_refused
    assert not report.refused
    [told] = report.nameless
    assert secret in told
    assert "no Service" in told
    assert summary(report).endswith("1 certificate names no Service")

    leaf, bundle = _leaf_and_bundle(kubeapi, secret)
    chain = load_certificates(leaf["tls.crt"])
    assert dns_sans(chain[0]) == []
    verify_nameless(chain[0], chain[1:], trusted=bundle_certificates({"ca-bundle.crt": bundle.decode()}), now=clock.now)
    with pytest.raises(ssl.SSLCertVerificationError):  # no host name verifies: not even the CN's words
        handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname=f"{name[:63]}.{NS}.svc")
    assert rec.status is not None  # the status page and API say it too
    [status] = [w for w in rec.status.workloads if w.secret == secret]
    assert status.names_problem == told
    [event] = [e for e in kubeapi.objects("events", NS) if e["reason"] == "NoServiceName"]
    assert event["involvedObject"]["name"] == name
    assert event["type"] == "Warning"

    assert rec.run_pass().write_count == 0  # kept as it is, converged
    _service(kubeapi, "front", name)  # a Service selects the pods: the next pass names it
    report = rec.run_pass()
    assert report.reasons["renewed:sans-changed"] == 1
    assert not report.nameless
    leaf, bundle = _leaf_and_bundle(kubeapi, secret)
    chain = load_certificates(leaf["tls.crt"])
    verify_server(chain[0], chain[1:], trusted=load_certificates(bundle), dns_name=f"front.{NS}.svc", now=clock.now)
