"""The RBAC that ships is exactly what the code uses: derived by running the real code against the API
emulator and reading the emulator's request log, never from a hand-kept list.

Both directions are checked: every call the code made is allowed by the shipped roles (else the pod
would get 403s in a cluster), and every verb the roles grant was used (else it is privilege to spare).
"""

from __future__ import annotations

import base64
import dataclasses
import signal
import ssl
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.kubeapi import Emulator, running_emulator
from tests.shipping.rbac import Call, Grant, authorized, grants_for
from tests.shipping.support import ROOT, Obj, only, reconciler, render, webhook
from tests.support.kubelet import identity_uids
from tests.support.reviews import fixture
from tests.test_cli_serve import serve_process, wait_ready
from tls_injector.cli import main
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.kube import KubeApi, LeaderElector
from tls_injector.names import SIGNER_NAME
from tls_injector.pki import issue_leaf, make_ca
from tls_injector.reconcile.loop.controller import Controller
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

INJECT = "tls-injector.io/inject"
BUNDLE = "tls-injector-trust-bundle"


def _shipped() -> list[Obj]:
    return render(ROOT / "manifests" / "base")


def _account() -> tuple[str, str]:
    deployment = reconciler(_shipped())
    return deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"]


def _wait(condition: Callable[[], bool], *, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _cluster(emu: Emulator) -> None:
    """A namespace opted in as a whole (with a bare pod) and a Deployment opted in elsewhere."""
    namespace, _ = _account()
    for kind in ("Namespace", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        emu.add(only(_shipped(), kind))
    emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {INJECT: "enabled"}}})
    emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plain"}})
    emu.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cart", "namespace": "shop"},
             "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "example/cart:1"}]}})
    emu.add({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "plain"},
             "spec": {"selector": {"matchLabels": {"app": "web"}},
                      "template": {"metadata": {"labels": {"app": "web", INJECT: "true"}},
                                   "spec": {"containers": [{"name": "c", "image": "example/web:1"}]}}}})
    del namespace


def _edit(emu: Emulator, qualified: str, namespace: str | None, name: str, change: Callable[[Obj], None]) -> None:
    """Change an object behind the code's back (straight in the store: not in the request log)."""
    resource = emu.resource(qualified)
    obj: Any = emu.get(qualified, name, namespace)
    change(obj)
    emu.store.update(resource, namespace, name, obj)


def _foreign_ca() -> str:
    return make_ca(common_name="someone else", now=datetime.now(UTC)).cert_pem.decode()


def _foreign_cert() -> str:
    """A well-formed certificate from a CA the reconciler does not know: it must be re-issued."""
    now = datetime.now(UTC)
    leaf = issue_leaf(issuer=make_ca(common_name="someone else", now=now), dns_names=["web"], now=now)
    return base64.b64encode(leaf.cert_pem).decode()


def _wrote(emu: Emulator, verb: str, qualified: str, times: int = 1) -> Callable[[], bool]:
    return lambda: sum(r.verb == verb and r.resource == qualified and r.code < 300 for r in emu.log) >= times


def _kubelet_asks(emu: Emulator, pod: str, namespace: str) -> None:
    """The kubelet's PodCertificateRequest for a pod's podCertificate volume (straight into the store)."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    uid = (emu.get("pods", pod, namespace) or {})["metadata"]["uid"]
    emu.add({"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
             "metadata": {"generateName": f"{pod}-", "namespace": namespace},
             "spec": {"signerName": SIGNER_NAME, "podName": pod, "podUID": uid, "serviceAccountName": "default",
                      "nodeName": "node-1", **identity_uids(emu, "node-1", namespace, "default"),
                      "stubPKCS10Request": base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()}})


def _implied_checks(emu: Emulator) -> set[Call]:
    """The apiserver's own authorization checks behind some writes: `sign` on the signer for a request's
    status, `attest` for a ClusterTrustBundle that names it (not requests, so not in the log)."""
    implied = {"podcertificaterequests/status.certificates.k8s.io": "sign",
               "clustertrustbundles.certificates.k8s.io": "attest"}
    return {Call(implied[r.resource], "certificates.k8s.io", "signers", None, SIGNER_NAME)
            for r in emu.log if r.resource in implied and r.verb in ("create", "update") and r.code < 300}


def _settings_of_the_deployment() -> ReconcileSettings:
    """The reconciler's settings exactly as `reconcile` builds them from its Deployment's flags."""
    pod = reconciler(_shipped())["spec"]["template"]["spec"]
    namespace, _ = _account()
    args = _parser().parse_args(pod["containers"][0]["args"])
    settings = settings_for(args, loop=not args.once)
    assert settings.webhook is not None, "the Deployment keeps its own certificate current"
    return dataclasses.replace(settings, namespace=namespace)  # in a pod: the service account's namespace


def _run_the_controller(emu: Emulator) -> None:
    """The reconciler as `reconcile` runs it (lease, watches, passes), through a life cycle that makes it use
    every kind of call: issue, mirror, renew the lease, then clean up after opt-outs."""
    namespace, _ = _account()
    api = KubeApi(emu.api_client())
    elector = LeaderElector(api, namespace, "rbac-test")
    reconciler = Reconciler(api, _settings_of_the_deployment(), may_write=lambda: elector.is_leader(datetime.now(UTC)))
    # The ClusterTrustBundle is not watched (its Role pins it by name: get and update only), so a broken one
    # is repaired by the next full pass: a resync every 2 s here, not 10 minutes. (Until the leader renewed
    # on its last write, the Lease's own 409 below made it step down for a round, and the full pass that
    # came with leading again did the repair.)
    controller = Controller(api, reconciler, elector, debounce_seconds=0.05, watch_timeout_seconds=1,
                            min_pass_gap_seconds=0.1, resync_seconds=2.0)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), name="controller-under-test")
    thread.start()
    try:
        _wait(_wrote(emu, "create", "configmaps"), what="the trust bundle")
        _wait(_wrote(emu, "update", "leases.coordination.k8s.io"), what="a lease renewal")
        _kubelet_asks(emu, "cart", "shop")
        _wait(_wrote(emu, "update", "podcertificaterequests/status.certificates.k8s.io"), what="a pod certificate")
        # Someone breaks both objects, and every repair first meets a concurrent writer (409, re-read).
        emu.conflict_on_first_write(verbs=("update",), touch=True)
        _edit(emu, "clustertrustbundles.certificates.k8s.io", None, "tls-injector.io:serving:cas",
              lambda o: o["spec"].__setitem__("trustBundle", o["spec"]["trustBundle"] * 1 + _foreign_ca()))
        _kubelet_asks(emu, "cart", "shop")
        _wait(_wrote(emu, "update", "podcertificaterequests/status.certificates.k8s.io", 2), what="a 2nd pod cert")
        _wait(_wrote(emu, "update", "clustertrustbundles.certificates.k8s.io"), what="the cluster bundle repair")
        _edit(emu, "configmaps", "shop", BUNDLE, lambda o: o.__setitem__("data", {}))
        _edit(emu, "secrets", "plain", "web-tls", lambda o: o["data"].__setitem__("tls.crt", _foreign_cert()))
        _wait(_wrote(emu, "update", "configmaps"), what="the bundle repair")
        _wait(_wrote(emu, "update", "secrets"), what="the certificate repair")
        _edit(emu, "namespaces", None, "shop", lambda o: o["metadata"]["labels"].pop(INJECT))
        _edit(emu, "deployments.apps", "plain", "web",
              lambda o: o["spec"]["template"]["metadata"]["labels"].pop(INJECT))
        _wait(_wrote(emu, "delete", "secrets"), what="the orphaned certificate Secret to go")
        _wait(_wrote(emu, "delete", "configmaps"), what="the orphaned bundle to go")
    finally:
        stop.set()
        thread.join(timeout=10)
    # The watch threads end with their 1 s server-side timeout; let them, so none outlives the emulator.
    _wait(lambda: not [t for t in threading.enumerate() if t.name.startswith("watch-")], what="watches to end")


def _grants() -> list[Grant]:
    namespace, account = _account()
    return grants_for(_shipped(), namespace=namespace, account=account)


def test_the_reconcilers_service_account_allows_every_call_the_reconciler_makes_and_nothing_more() -> None:
    with running_emulator(seed=0, certificates=("v1",)) as kubeapi:  # a 1.37 cluster: the signer works too
        _cluster(kubeapi)
        _run_the_controller(kubeapi)
        calls = {Call.of(r.verb, r.resource, r.namespace, r.name) for r in kubeapi.log} | _implied_checks(kubeapi)
    denied = sorted({(c.group, c.resource, c.verb, c.namespace) for c in calls if not authorized(_grants(), c)},
                    key=str)
    assert not denied, f"the shipped RBAC would refuse these calls: {denied}"
    used = {(c.group, c.resource, c.verb) for c in calls}
    spare = sorted({(g.group, g.resource, g.verb) for g in _grants()} - used)
    assert not spare, f"granted but never used, remove from manifests/base/rbac.yaml: {spare}"


def _bootstrap_objects() -> list[Obj]:
    return render(ROOT / "certs-bootstrap")


def test_the_bootstrap_jobs_service_account_allows_every_call_bootstrap_makes_and_nothing_more(
    kubeapi: Emulator,
) -> None:
    for kind in ("Namespace", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        kubeapi.add(only(_shipped(), kind))
    pod = only(_bootstrap_objects(), "Job")["spec"]["template"]["spec"]
    args = [*pod["containers"][0]["args"], f"--server={kubeapi.url}"]
    assert main(args) == 0  # first run: creates both Secrets, fills every caBundle
    kubeapi.conflict_on_first_write(verbs=("update",), touch=True)
    _edit(kubeapi, "secrets", "tls-injector", "tls-injector-webhook-tls",
          lambda o: o["data"].__setitem__("tls.crt", _foreign_cert()))
    _edit(kubeapi, "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, "tls-injector",
          lambda o: o["webhooks"][0]["clientConfig"].pop("caBundle"))
    assert main(args) == 0  # repairs: updates of a Secret and a configuration, each after a 409
    namespace = only(_bootstrap_objects(), "Job")["metadata"]["namespace"]
    grants = grants_for(_bootstrap_objects(), namespace=namespace, account=pod["serviceAccountName"])
    calls = {Call.of(r.verb, r.resource, r.namespace, r.name) for r in kubeapi.log}
    denied = sorted({(c.group, c.resource, c.verb, c.name) for c in calls if not authorized(grants, c)}, key=str)
    assert not denied, f"the bootstrap Job's RBAC would refuse these calls: {denied}"
    spare = sorted({(g.group, g.resource, g.verb) for g in grants} - {(c.group, c.resource, c.verb) for c in calls})
    assert not spare, f"granted but never used, remove from certs-bootstrap/rbac.yaml: {spare}"


def test_the_webhook_pods_make_no_api_call_and_their_service_account_is_granted_nothing(
    kubeapi: Emulator, tmp_path: Path,
) -> None:
    """`serve` with the webhook Deployment's flags, pointed at a cluster it could reach, answers admission
    calls without a single API request: the RBAC it needs is none, and none is granted."""
    _cluster(kubeapi)
    pod = webhook(_shipped())["spec"]["template"]["spec"]
    flags = [a for a in pod["containers"][0]["args"][1:] if a.split("=")[0] in ("--no-reconciler", "--drain-seconds")]
    assert "--no-reconciler" in flags
    with serve_process(tmp_path, *flags, f"--server={kubeapi.url}") as (process, url, ca_file):
        wait_ready(url, ca_file)
        context = ssl.create_default_context(cafile=str(ca_file))
        body = fixture("synthetic/pod-create-from-replicaset.json")
        assert httpx.post(url + "/mutate", json=body, verify=context).json()["response"]["allowed"] is True
        time.sleep(0.5)  # a reconciler started by mistake would have listed something by now
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    assert "reconciler off (--no-reconciler)" in stderr
    assert list(kubeapi.log) == []
    namespace = webhook(_shipped())["metadata"]["namespace"]
    assert grants_for(_shipped(), namespace=namespace, account=pod["serviceAccountName"]) == []
