"""The whole chain for every way pods are made, in both modes: each object goes through the real /mutate
over HTTPS (a CronJob's run twice: its Job, then its Pod), is stored in the API emulator as the apiserver
would store the patched object, then one reconcile pass runs through the official client. Then the node's
side: every volume of every stored pod is resolved against the stored objects as the kubelet would
(tests/support/kubelet.py, from the API reference's field semantics), and in every container the leaf
read from the certificate directory must verify against the bundle read from the trust directory, as a
TLS client verifies a server, with the key beside it. A volume the kubelet could not set up fails."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import jsonpatch
import pytest
import yaml
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tests.support.kubelet import NODE, Kubelet
from tests.support.reviews import review
from tests.support.server import running_server
from tests.support.workloads import CRD_KIND, INJECT, SECRET, SERVICES, Obj, Shape, build, manifest
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
from tls_injector.names import CERT_MOUNT_PATH, MODE_ANNOTATION, MODE_POD_CERTIFICATE, TRUST_MOUNT_PATH
from tls_injector.offline.inject import inject_manifests
from tls_injector.pki import load_certificates, verify_server

NS = "shop"
RESOURCES: dict[str, Resource] = {r.kind: r for r in (DEPLOYMENTS, STATEFUL_SETS, DAEMON_SETS, REPLICA_SETS, JOBS,
                                                      CRON_JOBS, PODS)}
OPTED_IN = {INJECT: "true"}
SHAPES = [
    Shape("Deployment", "web", OPTED_IN),
    Shape("StatefulSet", "db", OPTED_IN, {SERVICES: "db,db-headless"}),
    Shape("DaemonSet", "agent", OPTED_IN),
    Shape("Job", "migrate", OPTED_IN),
    Shape("Job", "backup-20261122", OPTED_IN),
    Shape("CronJob", "nightly", OPTED_IN),
    Shape("CronJob", "report", OPTED_IN, {SECRET: "reports-tls"}),
    Shape("ReplicaSet", "cache", OPTED_IN),
    Shape("Pod", "debug", OPTED_IN, generate_name=False),
    Shape("Pod", "dbg", OPTED_IN),
    Shape("Pod", "dbg", OPTED_IN, name_filled=True),
    Shape(CRD_KIND, "node-1", OPTED_IN),
    # Names as long as the API allows (valid, and they have pods): `<name>-tls` would be over the 253
    # characters of a Secret name, so it is cut and hashed. Their services are named (a Service name is a
    # DNS label of at most 63 characters, so the workload's name cannot be one).
    Shape("DaemonSet", "agent-" + "a" * 244, OPTED_IN, {SERVICES: "agent"}),
    Shape("ReplicaSet", ".".join(["c" * 63] * 4)[:253], OPTED_IN, {SERVICES: "cache"}),
]


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with running_server(tmp_path_factory.mktemp("srv"), mutate=make_mutate_handler(InjectionOptions())) as server, \
            server.client() as client:
        yield client


@pytest.fixture(scope="module")
def native_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The webhook of a cluster serving pod certificates (`--pod-certificates on`)."""
    options = InjectionOptions(pod_certificates=True)
    with running_server(tmp_path_factory.mktemp("native"), mutate=make_mutate_handler(options)) as server, \
            server.client() as client:
        yield client


def admitted(client: httpx.Client, obj: Obj, kind: tuple[str, str, str] = ("", "v1", "Pod")) -> Obj:
    """The object as the apiserver stores it after /mutate: the review over HTTPS, the patch applied."""
    reply = client.post("/mutate", json=review(obj=obj, kind=kind, namespace=NS))
    assert reply.status_code == 200, reply.text
    response = reply.json()["response"]
    assert response["allowed"] is True, response
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    result: Obj = jsonpatch.apply_patch(obj, ops)
    return result


class Cluster:
    """Objects created through the official client; a CRD's object (the emulator does not serve the
    kind, and the reconciler never reads it) only gets a uid, as its operator's API would give it."""

    def __init__(self, emu: Emulator, client: httpx.Client) -> None:
        self.api, self.client = KubeApi(emu.api_client()), client
        self.jobs_admitted = 0

    def create(self, obj: Obj) -> Obj:
        if obj["kind"] == CRD_KIND:
            return {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{obj['metadata']['name']}"}}
        return self.api.create(RESOURCES[obj["kind"]], obj, namespace=NS)

    def admit_job(self, job: Obj) -> Obj:
        self.jobs_admitted += 1
        return admitted(self.client, job, ("batch", "v1", "Job"))

    def run(self, shape: Shape) -> Obj:
        """The shape's objects, then its pod through /mutate, stored and bound to the node (the scheduler's
        binding, which admission never sees); returns the stored pod."""
        pod = admitted(self.client, build(shape, NS, create=self.create, admit_job=self.admit_job))
        pod["spec"]["nodeName"] = NODE
        return self.api.create(PODS, pod, namespace=NS)


def volumes(pod: Obj) -> tuple[str, str]:
    by_name = {v["name"]: v for v in pod["spec"]["volumes"]}
    return by_name["tls-injector-cert"]["secret"]["secretName"], by_name["tls-injector-trust"]["configMap"]["name"]


def assert_served_as_mounted(emu: Emulator, pod: Obj, service: str, clock: Clock,
                             kubelet: Kubelet | None = None) -> None:
    """The kubelet can set up every volume of the pod, and in every container the leaf at the certificate
    path, with its key, verifies against the bundle at the trust path (and against ca.crt) for `service`."""
    kubelet = kubelet or Kubelet(emu)
    kubelet.resolve(pod)  # every volume, ours or not
    spec = pod["spec"]
    for container in [c["name"] for c in (*(spec.get("initContainers") or []), *spec["containers"])]:
        files = kubelet.container_files(pod, container)
        chain = load_certificates(files[f"{CERT_MOUNT_PATH}/tls.crt"].content)
        key = load_pem_private_key(files[f"{CERT_MOUNT_PATH}/tls.key"].content, None)
        assert key.public_key() == chain[0].public_key(), f"{container}: tls.key is not the leaf's key"
        for trust in (f"{TRUST_MOUNT_PATH}/ca-bundle.crt", f"{CERT_MOUNT_PATH}/ca.crt"):
            trusted = load_certificates(files[trust].content)
            for name in (f"{service}.{NS}.svc", f"{service}.{NS}.svc.cluster.local"):
                verify_server(chain[0], chain[1:], trusted=trusted, dns_name=name, now=clock.now)


@pytest.mark.parametrize("enabled", [False, True], ids=["pod-label", "namespace-enabled"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: str(shape)[:40])
def test_every_mounted_secret_and_bundle_exist_after_one_pass_and_the_leaf_verifies(
    kubeapi: Emulator, webhook: httpx.Client, shape: Shape, enabled: bool
) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS, enabled=enabled)
    if enabled:  # in an opted-in namespace the pod label is not needed
        shape = Shape(shape.kind, shape.name, {}, shape.annotations, generate_name=shape.generate_name,
                      name_filled=shape.name_filled)
    cluster, clock = Cluster(kubeapi, webhook), Clock()
    pod = cluster.run(shape)
    assert volumes(pod)[0] == shape.expected_secret()
    assert cluster.jobs_admitted == (shape.kind == "CronJob")

    report = reconciler(kubeapi, clock).run_pass()
    assert report.converged, report
    assert_served_as_mounted(kubeapi, pod, shape.expected_services()[0], clock)
    secret = kubeapi.get("secrets", shape.expected_secret(), NS)
    assert secret is not None
    owners = {(r["kind"], r["name"]) for r in secret["metadata"]["ownerReferences"]}
    user = pod["metadata"]["name"] if shape.kind == "Pod" else shape.rs_name
    assert owners == {(shape.kind, user)}, "the Secret is owned by the workload its pods belong to"


def test_every_run_of_a_cronjob_mounts_the_one_secret_inject_renders(kubeapi: Emulator, webhook: httpx.Client) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    cluster, clock = Cluster(kubeapi, webhook), Clock()
    shape = Shape("CronJob", "nightly", OPTED_IN)
    first = cluster.run(shape)
    cron = kubeapi.objects("cronjobs", NS)[0]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "nightly-29401440", "namespace": NS, "ownerReferences": [
               {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": cron["metadata"]["uid"],
                "controller": True}]},
           "spec": {"template": cron["spec"]["jobTemplate"]["spec"]["template"]}}
    stored_job = cluster.create(cluster.admit_job(job))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        **stored_job["spec"]["template"]["metadata"], "generateName": "nightly-29401440-", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly-29401440", "uid": stored_job["metadata"]["uid"],
             "controller": True}]}, "spec": stored_job["spec"]["template"]["spec"]}
    second_pod = admitted(webhook, pod)
    second_pod["spec"]["nodeName"] = NODE
    second = cluster.api.create(PODS, second_pod, namespace=NS)
    assert volumes(first) == volumes(second) == ("nightly-tls", "tls-injector-trust-bundle")
    assert reconciler(kubeapi, clock).run_pass().converged
    assert [s["metadata"]["name"] for s in kubeapi.objects("secrets", NS)] == ["nightly-tls"]
    assert_served_as_mounted(kubeapi, second, "nightly", clock)


def garbage(emu: Emulator) -> set[str]:
    """The leaf Secrets Kubernetes' garbage collector would delete now: every owner is gone (no object of
    that kind, name and uid)."""
    plurals = {r.kind: r.plural for r in RESOURCES.values()}

    def gone(ref: dict[str, Any], namespace: str) -> bool:
        found = emu.get(plurals[ref["kind"]], ref["name"], namespace)
        return found is None or found["metadata"]["uid"] != ref["uid"]

    return {s["metadata"]["name"] for s in emu.objects("secrets", NS)
            if s["metadata"].get("ownerReferences") and all(gone(r, NS) for r in s["metadata"]["ownerReferences"])}


def test_a_shared_secret_goes_with_its_last_user_as_the_garbage_collector_would_remove_it(
    kubeapi: Emulator, webhook: httpx.Client
) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    cluster, clock = Cluster(kubeapi, webhook), Clock()
    shared = {SECRET: "shared-tls"}
    cluster.run(Shape("Deployment", "web", OPTED_IN, shared))
    cluster.run(Shape("CronJob", "nightly", OPTED_IN, shared))
    bare = cluster.run(Shape("Pod", "dbg", OPTED_IN))
    assert reconciler(kubeapi, clock).run_pass().converged
    for pod in kubeapi.objects("pods", NS):
        Kubelet(kubeapi).resolve(pod)
    secret = kubeapi.get("secrets", "shared-tls", NS)
    assert secret is not None
    references = secret["metadata"]["ownerReferences"]
    assert {(r["kind"], r["name"]) for r in references} == {("Deployment", "web"), ("CronJob", "nightly")}
    assert all(r["controller"] is False and r["blockOwnerDeletion"] is False for r in references)

    # Deleting the Deployment, then the CronJob (the collector takes their ReplicaSet and Job along,
    # which the emulator does not), then the pod.
    steps = [[(DEPLOYMENTS, "web"), (REPLICA_SETS, "web-5f6b7c9d8")],
             [(CRON_JOBS, "nightly"), (JOBS, "nightly-29400000")], [(PODS, bare["metadata"]["name"])]]
    for step, left in zip(steps, [{"shared-tls", "dbg-tls"}, {"dbg-tls"}, set()], strict=True):
        before = {s["metadata"]["name"] for s in kubeapi.objects("secrets", NS)}
        for resource, name in step:
            cluster.api.delete(resource, name, namespace=NS)
        collected = garbage(kubeapi)
        assert reconciler(kubeapi, clock).run_pass().converged
        remaining = {s["metadata"]["name"] for s in kubeapi.objects("secrets", NS)}
        assert remaining == left, step
        assert before - remaining == collected, "the reconciler removes exactly what the collector would"
    assert collected == {"dbg-tls"}


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: str(shape)[:40])
def test_in_pod_certificate_mode_the_kubelet_resolves_every_volume_and_the_leaf_verifies(
    native_webhook: httpx.Client, shape: Shape, version: str
) -> None:
    """The same chain where pods ask for pod certificates: the kubelet's request from the projection, the
    signer's answer, the ClusterTrustBundle the projection names; and no Secret for the workload. The
    mode sits in the template, deeper in a CronJob than in other kinds."""
    shape = Shape(shape.kind, shape.name, shape.labels, {**shape.annotations, MODE_ANNOTATION: MODE_POD_CERTIFICATE},
                  generate_name=shape.generate_name, name_filled=shape.name_filled)
    clock = Clock()
    with running_emulator(seed=0, certificates=(version,), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, NS)
        pod = Cluster(emu, native_webhook).run(shape)
        kubelet = Kubelet(emu)
        kubelet.start(pod)
        assert reconciler(emu, clock).run_pass().converged
        clock.advance(timedelta(minutes=1))  # the signer backdates nothing: verify inside the lifetime
        assert_served_as_mounted(emu, pod, shape.expected_services()[0], clock, kubelet)
        assert emu.objects("secrets", NS) == [], "pod certificates: no Secret, the key never left the node"


def test_a_cronjob_asking_for_pod_certificates_gets_no_secret_where_they_are_served(
        native_webhook: httpx.Client) -> None:
    """The mode sits in the CronJob's pod template, deeper than other kinds keep it."""
    clock = Clock()
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, NS)
        native = Cluster(emu, native_webhook).run(
            Shape("CronJob", "nightly", OPTED_IN, {MODE_ANNOTATION: MODE_POD_CERTIFICATE}))
        plain = Cluster(emu, native_webhook).run(Shape("CronJob", "report", OPTED_IN))
        kubelet = Kubelet(emu)
        kubelet.start(native)
        assert reconciler(emu, clock).run_pass().converged
        assert [s["metadata"]["name"] for s in emu.objects("secrets", NS)] == ["report-tls"]
        clock.advance(timedelta(minutes=1))
        assert_served_as_mounted(emu, native, "nightly", clock, kubelet)
        assert_served_as_mounted(emu, plain, "report", clock, kubelet)


def test_a_pod_that_asked_for_pod_certificates_but_was_given_the_secret_gets_it_issued(webhook: httpx.Client) -> None:
    """A webhook not told the cluster serves pod certificates (the split install's `auto` means off) mounts
    the Secret for a pod that asked for them, with a warning: the reconciler must issue that Secret, or the
    kubelet cannot set the volume up and the pod never starts."""
    clock = Clock()
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, NS)
        for shape in (Shape("CronJob", "nightly", OPTED_IN, {MODE_ANNOTATION: MODE_POD_CERTIFICATE}),
                      Shape("Pod", "dbg", OPTED_IN, {MODE_ANNOTATION: MODE_POD_CERTIFICATE})):
            pod = Cluster(emu, webhook).run(shape)
            assert volumes(pod)[0] == shape.expected_secret()
            assert reconciler(emu, clock).run_pass().converged
            assert_served_as_mounted(emu, pod, shape.name, clock)


def test_a_secret_name_over_253_characters_is_refused_as_too_long(webhook: httpx.Client) -> None:
    """A name the pod asks for is the user's to fix, so it is refused, and the message says what is wrong
    with it (not merely "not a valid DNS subdomain", with the name cut short)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "debug", "labels": OPTED_IN, "annotations": {SECRET: "s" * 254}},
           "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}
    reply = webhook.post("/mutate", json=review(obj=pod, namespace=NS)).json()["response"]
    assert reply["allowed"] is False
    assert "too long: 254 characters, at most 253" in reply["status"]["message"]


@pytest.mark.parametrize("shape", SHAPES[-2:], ids=lambda shape: shape.kind)
def test_inject_mounts_the_shortened_name_the_reconciler_issues(shape: Shape) -> None:
    applied = manifest(shape, NS)
    assert applied is not None
    out = inject_manifests(yaml.safe_dump(applied), options=InjectionOptions()).text
    volumes = yaml.safe_load(out)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls-injector-cert", "secret": {"secretName": shape.expected_secret()}} in volumes
    assert len(shape.expected_secret()) == 253
