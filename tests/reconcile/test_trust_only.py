"""Issue 39, point 6: trust without a certificate. A pure client (a Job calling an internal API) asks for the
bundle alone with `tls-injector.io/mode: trust-only`: /mutate gives it the trust bundle and the TLS env
vars, no certificate volume; the reconciler issues it no Secret but writes its namespace's bundle; the
kubelet can set the pod up, and a TLS client reading the file SSL_CERT_FILE names verifies a served
workload. The doctor says when such a namespace lacks its bundle."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.doctor.cluster import healthy_cluster, line, run
from tests.kubeapi import Emulator
from tests.pki.tls import Party, handshake
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tests.support.kubelet import NODE, Kubelet
from tests.support.reviews import answer, review
from tests.support.workloads import Obj
from tls_injector import names
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.injection.preview import what_pods_get
from tls_injector.kube import JOBS, PODS, KubeApi
from tls_injector.reconcile.core.discover import trust_only_split

MODE, INJECT = "tls-injector.io/mode", "tls-injector.io/inject"
NS = "team-a"
TITLE = "every namespace with a trust-only client has its trust bundle"
MUTATE = make_mutate_handler(InjectionOptions())


def _job(name: str = "caller", **annotations: str) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {"metadata": {"labels": {INJECT: "true"},
                                               "annotations": {MODE: "trust-only", **annotations}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "curl", "image": "curlimages/curl:8"}]}}}}


def _pod_of(job: Obj) -> Obj:
    """The Job's pod through /mutate, as the apiserver stores it (bound to the node)."""
    template = job["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**template["metadata"], "generateName": f"{job['metadata']['name']}-", "namespace": NS,
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                             "uid": job["metadata"].get("uid", "job-uid"), "controller": True}]},
           "spec": {**template["spec"], "nodeName": NODE}}
    response = answer(MUTATE, review(obj=pod, namespace=NS))
    assert response["allowed"], response
    patched: Obj = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    return patched


def test_a_trust_only_client_gets_the_bundle_and_env_and_no_certificate_and_verifies_a_served_workload(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "api", NS)  # the internal API the client calls
    api = KubeApi(kubeapi.api_client())
    job = api.create(JOBS, _job(), namespace=NS)
    pod = api.create(PODS, _pod_of(job), namespace=NS)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert list(volumes) == ["tls-injector-trust"]  # no certificate volume at all
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env == dict.fromkeys(("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"),
                                "/etc/tls-injector/trust/ca-bundle.crt")

    report = reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    assert report.converged
    assert sorted(s["metadata"]["name"] for s in kubeapi.objects("secrets", NS)) == ["api-tls"]  # none for caller

    files = Kubelet(kubeapi).container_files(pod, "curl")  # every volume resolves: the pod can start
    bundle = files[env["SSL_CERT_FILE"]].content
    served = data(kubeapi.get("secrets", "api-tls", NS))
    assert handshake(Party(served["tls.crt"], served["tls.key"]), bundle_pem=bundle,
                     hostname=f"api.{NS}.svc.cluster.local").startswith("TLSv1")


def test_a_trust_only_pod_alone_in_a_namespace_still_gets_the_bundle_and_chooses_its_env(kubeapi: Emulator) -> None:
    """Without any serving workload there: the namespace's bundle is written for the client alone; the env
    annotation still chooses which variables."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    api = KubeApi(kubeapi.api_client())
    job = api.create(JOBS, _job(**{"tls-injector.io/env": "NODE_EXTRA_CA_CERTS"}), namespace=NS)
    pod = api.create(PODS, _pod_of(job), namespace=NS)
    assert [e["name"] for e in pod["spec"]["containers"][0]["env"]] == ["NODE_EXTRA_CA_CERTS"]
    assert reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass().converged
    assert kubeapi.objects("secrets", NS) == []
    assert kubeapi.get("configmaps", "tls-injector-trust-bundle", NS) is not None
    Kubelet(kubeapi).resolve(pod)


def test_a_client_certificate_is_refused_with_trust_only() -> None:
    template = _job(**{"tls-injector.io/client-certificate": "true"})["spec"]["template"]
    [line_] = what_pods_get("Job", "caller", template["metadata"], InjectionOptions())
    assert "will be refused" in line_
    assert "trust-only pod gets no certificate" in line_


def test_the_dry_run_preview_says_trust_alone() -> None:
    [line_] = what_pods_get("Deployment", "caller", _job()["spec"]["template"]["metadata"], InjectionOptions())
    assert "will get trust alone" in line_
    assert "SSL_CERT_FILE" in line_
    assert "no certificate, no Secret" in line_


def _deployment(annotations: dict[str, str], label: str | None = "true") -> Obj:
    labels = {"app": "api", **({INJECT: label} if label else {})}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": labels, "annotations": annotations},
                                  "spec": {"containers": [{"name": "a", "image": "x"}]}}}}


@pytest.mark.parametrize(("old", "new", "allowed"), [
    (_deployment({}), _deployment({MODE: "trust-only"}), False),  # a serving workload would lose its certificate
    (_deployment({MODE: "secret"}), _deployment({MODE: " trust-only "}), False),
    (_deployment({MODE: "trust-only"}), _deployment({}), True),  # gaining a certificate: enabling
    (_deployment({MODE: "trust-only"}), _deployment({MODE: "pod-certificate"}), True),
    (_deployment({}, label=None), _deployment({MODE: "trust-only"}), True),  # was not opted in
    (_deployment({MODE: "trust-only"}), _deployment({MODE: "trust-only"}), True),
])
def test_turning_a_serving_workload_into_a_trust_only_client_in_place_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: Obj, new: Obj, allowed: bool) -> None:
    """Through `tls-injector check`, the same rule set /validate judges with."""
    (tmp_path / "old.yaml").write_text(json.dumps(old))
    (tmp_path / "new.yaml").write_text(json.dumps(new))
    code, out = run(["check", "--old", str(tmp_path / "old.yaml"), "--new", str(tmp_path / "new.yaml")], capsys)
    assert code == (0 if allowed else 1), out
    assert ("workload-trust-only-transition" in out) is not allowed


def test_the_doctor_fails_while_a_trust_only_clients_namespace_has_no_bundle(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        namespace(kubeapi, NS)
        kubeapi.add(_pod_of(_job()) | {"metadata": {**_pod_of(_job())["metadata"], "name": "caller-x7k2p"}})
        code, out = run(cluster.doctor(), capsys)
        assert code == 1
        assert line(out, TITLE).startswith("✖")
        reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
        code, out = run(cluster.doctor(), capsys)
        assert line(out, TITLE).startswith("✔"), out


def _deployment(name: str, namespace: str, mode: str = "") -> tuple[str, dict[str, Any]]:
    annotations = {names.MODE_ANNOTATION: mode} if mode else {}
    return "Deployment", {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": {
        "template": {"metadata": {"labels": {names.INJECT_LABEL: names.POD_OPT_IN}, "annotations": annotations}}}}


def _pod(name: str, namespace: str, owner: str | None, mode: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {names.INJECT_LABEL: names.POD_OPT_IN},
                            "annotations": {names.MODE_ANNOTATION: mode} if mode else {}}
    if owner is not None:  # a ReplicaSet of `owner` (a Deployment), as the controller names it
        meta["labels"]["pod-template-hash"] = "5d8f7c9b6"
        meta.update(generateName=f"{owner}-5d8f7c9b6-", ownerReferences=[
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{owner}-5d8f7c9b6", "uid": "rs",
             "controller": True}])
    return {"metadata": meta}


def test_the_split_keeps_a_trust_only_workload_while_a_pod_of_its_own_mounts_its_secret() -> None:
    """Trust-only workloads and pods leave the Secret users; a workload moving to trust-only keeps its Secret
    while one of its own pods (not trust-only) still mounts it; a trust-only object's namespace gets the bundle
    when it opted in. A pass with no trust-only object gives back what it was given."""
    served, moving = _deployment("web", "a"), _deployment("api", "a", "trust-only")
    gone = _deployment("db", "b", "trust-only")
    workloads = [served, moving, gone]
    pods = [_pod("api-5d8f7c9b6-x1", "a", "api"), _pod("client", "c", None, "trust-only"),
            _pod("web-5d8f7c9b6-x2", "a", "web")]
    kept, kept_pods, namespaces = trust_only_split(workloads, pods, enabled=set())
    assert kept == [served, moving], "api's old pod still mounts api-tls; db has no pod left"
    assert kept_pods == [pods[0], pods[2]]
    assert namespaces == {"a", "b", "c"}
    assert trust_only_split([served], pods[:1], enabled=set()) == ([served], pods[:1], set())
    unlabelled = _pod("other", "d", None, "trust-only")
    unlabelled["metadata"]["labels"] = {}
    assert trust_only_split([], [unlabelled], enabled=set()) == ([], [], set()), "not opted in: no bundle asked"
    assert trust_only_split([], [unlabelled], enabled={"d"}) == ([], [], {"d"}), "its namespace opted it in"
