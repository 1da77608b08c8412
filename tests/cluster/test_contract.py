"""The contract between the emulator (tests/kubeapi) and the real kube-apiserver: every kind of write the
reconciler and the doctor make, and every limit the emulator enforces, sent to both, with the same
verdict (HTTP status, Status reason, and each 422 cause's reason and field).

One table, CASES; each case is a function of one server that sets up what it needs (steps that must
succeed on both) and returns the verdict of its last request. It runs against the real apiserver and
then the emulator, each in a fresh namespace; the real verdict must be the one the table expects (so
the table documents the apiserver) and the emulator's must equal it. The fast tests trust the
emulator because this file holds it to the real thing.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import kubernetes.client
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.cluster.contract import MERGE_PATCH, Obj, Reply, Server, Verdict, fresh_namespace_name, namespaced
from tests.cluster.controlplane import ControlPlane, api_client
from tests.kubeapi import Emulator, running_emulator
from tests.kubeapi.errors import MAX_REQUEST_BODY, MAX_STORED_OBJECT
from tests.support.kubelet import pkix_spec
from tls_injector import names
from tls_injector.kube import (
    CONFIG_MAPS,
    EVENTS,
    LEASES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    VALIDATING_WEBHOOKS,
    KubeApi,
    LeaderElector,
)
from tls_injector.pki import public_roots, with_public_roots
from tls_injector.pki.bundle import trust_bundle
from tls_injector.pki.certs import make_ca
from tls_injector.pki.podcert import issue_for_key, pod_cert_times
from tls_injector.reconcile.core import events, ownership
from tls_injector.reconcile.core.discover import WorkloadRef
from tls_injector.reconcile.core.keystores import Keystore, with_keystore
from tls_injector.reconcile.core.leaves import owner_references
from tls_injector.reconcile.core.objects import Write
from tls_injector.reconcile.native import podcerts
from tls_injector.reconcile.parts.webhook_plan import decide_ca_bundle

KIB, MIB = 1024, 1024 * 1024
NOW = datetime.now(UTC)
CA = make_ca(common_name="contract-ca", now=NOW)
OTHER_CA = make_ca(common_name="contract-other-ca", now=NOW)
SIGNER = "contract.tls-injector.io/signer"
CERTS = "certificates.k8s.io/v1"
ADMISSION = "admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class Case:
    id: str
    expect: int  # the real apiserver's status code: the table documents it
    run: Callable[[Server], Verdict]


CASES: list[Case] = []


def case(expect: int) -> Callable[[Callable[[Server], Verdict]], Callable[[Server], Verdict]]:
    def register(run: Callable[[Server], Verdict]) -> Callable[[Server], Verdict]:
        CASES.append(Case(run.__name__.removeprefix("case_").replace("_", "-"), expect, run))
        return run

    return register


# ---- bodies ------------------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def workload(s: Server) -> WorkloadRef:
    """The Deployment `web` (no replicas), created on first use: a Secret's owner must exist, or the
    real garbage collector deletes the Secret moments after it is written."""
    path = namespaced(s, "deployments", group="apps/v1")
    found = s.send("GET", f"{path}/web")
    if found.code == 404:
        body = {**_deployment({"app": "web"}, {"app": "web"}), "spec": {
            **_deployment({"app": "web"}, {"app": "web"})["spec"], "replicas": 0}}
        found = Reply(201, s.ok("POST", path, body))
    return WorkloadRef("Deployment", s.namespace, "web", uid=found.body["metadata"]["uid"])


def leaf_secret(s: Server, name: str = "web-tls") -> Obj:
    """A workload's certificate Secret as the reconciler writes it: kubernetes.io/tls, our labels, one
    ownerReference per workload (tls_injector.reconcile.core.leaves.owner_references)."""
    ref = workload(s)
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": s.namespace, "labels": ownership.owner_labels("leaf"),
                         "annotations": {"tls-injector.io/issued-for": "web"},
                         "ownerReferences": owner_references([ref])},
            "data": {"tls.crt": b64(CA.cert_pem), "tls.key": b64(CA.key_pem), "ca.crt": b64(CA.cert_pem)}}


def bundle_map(s: Server) -> Obj:
    """The namespace's trust bundle ConfigMap: ca-bundle.crt and one ca-<sha256 prefix>.crt per CA."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "tls-injector-trust-bundle", "namespace": s.namespace,
                         "labels": ownership.owner_labels("bundle")},
            "data": trust_bundle([CA.cert, OTHER_CA.cert], now=NOW)}


def config_map(name: str, **fields: object) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


def secret(name: str, **fields: object) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, **fields}


def meta(name: str, **fields: object) -> Obj:
    return config_map(name) | {"metadata": {"name": name, **fields}}


def created(s: Server, plural: str, body: Obj, *, group: str = "") -> Obj:
    return s.ok("POST", namespaced(s, plural, group=group), body)


def put(s: Server, plural: str, body: Obj, *, group: str = "") -> Reply:
    return s.send("PUT", namespaced(s, plural, body["metadata"]["name"], group=group), body)


# ---- the reconciler's writes: Secrets -------------------------------------------------------------


@case(201)
def case_a_leaf_secret_is_created(s: Server) -> Verdict:
    reply = s.send("POST", namespaced(s, "secrets"), leaf_secret(s))
    return reply.verdict(seen=sorted(reply.body.get("data") or {}))


@case(201)
def case_a_leaf_secret_with_a_jvm_keystore_is_created(s: Server) -> Verdict:
    """Issue 39 point 4: keystore.p12, truststore.p12 (binary PKCS#12) and keystore.password beside the
    PEM files of a kubernetes.io/tls Secret, as keystores.with_keystore writes them."""
    body = leaf_secret(s)
    body["data"] = with_keystore(body["data"], Keystore())
    reply = s.send("POST", namespaced(s, "secrets"), body)
    return reply.verdict(seen=sorted(reply.body.get("data") or {}))


@case(200)
def case_a_secret_is_replaced_at_its_resource_version(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    renewed = {**stored, "data": {**stored["data"], "tls.crt": b64(OTHER_CA.cert_pem)}}
    reply = put(s, "secrets", renewed)
    return reply.verdict(seen=reply.body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"])


@case(409)
def case_a_secret_replaced_at_a_stale_resource_version_is_a_conflict(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    put(s, "secrets", {**stored, "metadata": {**stored["metadata"], "labels": {"touched": "yes"}}})
    return put(s, "secrets", stored).verdict()


@case(409)
def case_creating_a_secret_that_exists_is_already_exists(s: Server) -> Verdict:
    created(s, "secrets", leaf_secret(s))
    return s.send("POST", namespaced(s, "secrets"), leaf_secret(s)).verdict()


def _delete(s: Server, plural: str, name: str, resource_version: str = "", uid: str = "") -> Reply:
    """DELETE with preconditions, as tls_injector.kube.KubeApi.delete sends it."""
    body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
    pre = {k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v}
    if pre:
        body["preconditions"] = pre
    return s.send("DELETE", namespaced(s, plural, name), body)


@case(200)
def case_a_secret_is_deleted_at_its_resource_version(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    return _delete(s, "secrets", "web-tls", stored["metadata"]["resourceVersion"]).verdict()


@case(409)
def case_a_delete_at_a_stale_resource_version_is_a_conflict(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    put(s, "secrets", {**stored, "metadata": {**stored["metadata"], "labels": {"touched": "yes"}}})
    return _delete(s, "secrets", "web-tls", stored["metadata"]["resourceVersion"]).verdict()


@case(409)
def case_a_delete_for_another_uid_is_a_conflict(s: Server) -> Verdict:
    created(s, "secrets", leaf_secret(s))
    return _delete(s, "secrets", "web-tls", uid="00000000-0000-4000-8000-000000000000").verdict()


@case(404)
def case_deleting_a_missing_secret_is_not_found(s: Server) -> Verdict:
    return _delete(s, "secrets", "gone-tls", "1").verdict()


@case(404)
def case_replacing_a_missing_secret_is_not_found(s: Server) -> Verdict:
    return put(s, "secrets", {**leaf_secret(s), "metadata": {"name": "web-tls", "resourceVersion": "1"}}).verdict()


# ---- the hub's writes in a member: Secrets written without reading them (tls_injector.kube.KubeApi.overwrite) --


def _blind(body: Obj) -> Obj:
    return {**body, "metadata": {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}}


@case(200)
def case_a_secret_is_overwritten_without_a_resource_version(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    put(s, "secrets", {**stored, "metadata": {**stored["metadata"], "labels": {
        **stored["metadata"]["labels"], "touched": "yes"}}})  # someone wrote it since: no conflict
    reply = put(s, "secrets", _blind({**leaf_secret(s), "data": {**leaf_secret(s)["data"],
                                                                  "tls.crt": b64(OTHER_CA.cert_pem)}}))
    return reply.verdict(seen=(reply.body.get("data") or {}).get("tls.crt") == b64(OTHER_CA.cert_pem))


@case(404)
def case_overwriting_a_missing_secret_is_not_found(s: Server) -> Verdict:
    return put(s, "secrets", _blind(leaf_secret(s, "gone-tls"))).verdict()


@case(422)
def case_overwriting_a_secret_of_another_type_is_invalid(s: Server) -> Verdict:
    created(s, "secrets", secret("web-tls", type="Opaque", data={"x": b64(b"someone's")}))
    return put(s, "secrets", _blind(leaf_secret(s))).verdict()


@case(422)
def case_a_tls_secret_needs_its_certificate_and_key(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "secrets"), secret("half", type="kubernetes.io/tls",
                                                           data={"ca.crt": b64(CA.cert_pem)})).verdict()


@case(422)
def case_a_secrets_type_is_immutable(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    return put(s, "secrets", {**stored, "type": "Opaque"}).verdict()


@case(422)
def case_an_immutable_secrets_data_cannot_change(s: Server) -> Verdict:
    stored = created(s, "secrets", secret("sealed", immutable=True, data={"a": b64(b"1")}))
    return put(s, "secrets", {**stored, "data": {"a": b64(b"2")}}).verdict()


@case(400)
def case_secret_data_must_be_base64(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "secrets"), secret("raw", data={"a": "not base64!"})).verdict()


@case(201)
def case_string_data_is_folded_into_data(s: Server) -> Verdict:
    reply = s.send("POST", namespaced(s, "secrets"), secret("strings", stringData={"a": "x"}, data={"b": b64(b"y")}))
    return reply.verdict(seen=(reply.body.get("data"), "stringData" in reply.body, reply.body.get("type")))


@case(201)
def case_a_secret_holds_1_mib_of_decoded_data(s: Server) -> Verdict:
    body = secret("full", data={"a": b64(b"x" * (MIB - 1)), "b": b64(b"x")})
    return s.send("POST", namespaced(s, "secrets"), body).verdict()


@case(422)
def case_a_secret_over_1_mib_is_refused(s: Server) -> Verdict:
    body = secret("over", data={"a": b64(b"x" * (MIB - 1)), "b": b64(b"xx")})
    return s.send("POST", namespaced(s, "secrets"), body).verdict()


@case(422)
def case_a_tls_secret_keeps_its_key_on_update(s: Server) -> Verdict:
    stored = created(s, "secrets", leaf_secret(s))
    return put(s, "secrets", {**stored, "data": {"tls.crt": stored["data"]["tls.crt"]}}).verdict()


@case(404)
def case_a_secret_in_a_missing_namespace_is_not_found(s: Server) -> Verdict:
    path = f"/api/v1/namespaces/{s.namespace}-missing/secrets"
    return s.send("POST", path, secret("web-tls", data={"a": b64(b"1")})).verdict()


# ---- ConfigMaps --------------------------------------------------------------------------------------


@case(201)
def case_a_trust_bundle_config_map_is_created(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "configmaps"), bundle_map(s)).verdict()


@case(201)
def case_a_trust_bundle_with_the_public_roots_and_their_source_is_created(s: Server) -> Verdict:
    """Issue 39 point 5: the `.pem` key of ~180 KB (our CAs and certifi's roots) and the annotation naming
    the certifi release, as decide_bundle writes them."""
    body = bundle_map(s)
    body["data"][names.PUBLIC_BUNDLE_KEY] = with_public_roots(body["data"][names.BUNDLE_KEY])
    body["metadata"]["annotations"] = {names.PUBLIC_ROOTS_SOURCE_ANNOTATION: public_roots().source}
    reply = s.send("POST", namespaced(s, "configmaps"), body)
    return reply.verdict(seen=sorted(reply.body.get("data") or {}))


@case(200)
def case_a_trust_bundle_is_replaced_at_its_resource_version(s: Server) -> Verdict:
    stored = created(s, "configmaps", bundle_map(s))
    return put(s, "configmaps", {**stored, "data": trust_bundle([CA.cert], now=NOW)}).verdict()


@case(201)
def case_a_config_map_holds_1_mib_of_data_and_binary_data(s: Server) -> Verdict:
    body = config_map("full", data={"a": "x" * (MIB - 3)}, binaryData={"b": b64(b"xyz")})
    return s.send("POST", namespaced(s, "configmaps"), body).verdict()


@case(422)
def case_a_config_map_over_1_mib_is_refused(s: Server) -> Verdict:
    body = config_map("over", data={"a": "x" * (MIB - 3)}, binaryData={"b": b64(b"wxyz")})
    return s.send("POST", namespaced(s, "configmaps"), body).verdict()


@case(201)
def case_a_config_key_may_have_253_characters(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "configmaps"), config_map("k253", data={"k" * 253: "v"})).verdict()


@case(422)
def case_a_config_key_of_254_characters_is_refused(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "configmaps"), config_map("k254", data={"k" * 254: "v"})).verdict()


@case(422)
def case_a_config_key_is_alphanumerics_dashes_dots_underscores(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "configmaps"), config_map("slash", data={"a/b": "v"})).verdict()


@case(422)
def case_a_key_may_not_be_in_data_and_binary_data(s: Server) -> Verdict:
    body = config_map("twice", data={"a": "v"}, binaryData={"a": b64(b"v")})
    return s.send("POST", namespaced(s, "configmaps"), body).verdict()


@case(422)
def case_an_immutable_config_maps_data_cannot_change(s: Server) -> Verdict:
    stored = created(s, "configmaps", config_map("sealed", immutable=True, data={"a": "1"}))
    return put(s, "configmaps", {**stored, "data": {"a": "2"}}).verdict()


@case(422)
def case_an_immutable_config_map_stays_immutable(s: Server) -> Verdict:
    stored = created(s, "configmaps", config_map("sealed", immutable=True, data={"a": "1"}))
    return put(s, "configmaps", {**stored, "immutable": False}).verdict()


@case(200)
def case_an_orphaned_bundle_is_deleted_at_its_resource_version(s: Server) -> Verdict:
    stored = created(s, "configmaps", bundle_map(s))
    return _delete(s, "configmaps", "tls-injector-trust-bundle", stored["metadata"]["resourceVersion"]).verdict()


# ---- Events --------------------------------------------------------------------------------------------


def _event(s: Server, namespace: str | None = None) -> Obj:
    """The namespace's issuance Event as the reconciler writes it: about its trust bundle, no uid."""
    body = events.event_body(events.issued_ref(namespace or s.namespace), reason="CertificatesIssued",
                             message=events.issued_message(["Secret web-tls: certificate issued (missing)"]),
                             kind="Normal", now=datetime.now(UTC))
    return {**body, "metadata": {**body["metadata"], "namespace": s.namespace}}  # type: ignore[dict-item]


@case(201)
def case_the_reconcilers_event_is_created(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "events"), _event(s)).verdict()


@case(422)
def case_an_event_about_an_object_of_another_namespace_is_refused(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "events"), _event(s, namespace="elsewhere")).verdict()


@case(422)
def case_a_core_event_with_an_event_time_names_its_reporter(s: Server) -> Verdict:
    body = {**_event(s), "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "action": "Issue"}
    body.pop("reportingComponent")
    return s.send("POST", namespaced(s, "events"), body).verdict()


def _new_event(**fields: object) -> Obj:
    body: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "web.17a"},
                 "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                 "reportingController": "tls-injector.io/reconciler", "reportingInstance": "tls-injector-0",
                 "action": "Issue", "reason": "CertificateIssued", "type": "Normal", "note": "issued",
                 "regarding": {"kind": "Deployment", "apiVersion": "apps/v1", "name": "web", "namespace": "x"}}
    return {**body, **fields}


@case(201)
def case_an_events_k8s_io_event_is_created(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "events", group="events.k8s.io/v1"), _new_event()).verdict()


@case(422)
def case_an_events_k8s_io_event_needs_its_reporting_fields(s: Server) -> Verdict:
    body = _new_event(reportingController="", action="", type="Info", regarding={"kind": "Deployment"})
    return s.send("POST", namespaced(s, "events", group="events.k8s.io/v1"), body).verdict()


# ---- Leases (leader election) ------------------------------------------------------------------------


@case(200)
def case_the_leader_lease_is_taken_then_renewed(s: Server) -> Verdict:
    """tls_injector.kube.LeaderElector itself, through tls_injector.kube.KubeApi: a create, then a replace at its
    version."""
    elector = LeaderElector(KubeApi(s.client), s.namespace, "replica-a")
    first = elector.try_lead(datetime.now(UTC))
    second = elector.try_lead(datetime.now(UTC) + timedelta(seconds=2))
    lease = s.ok("GET", namespaced(s, "leases", elector.name, group=LEASES.prefix.removeprefix("/apis/")))
    return Verdict(200, seen=(first, second, lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]))


@case(409)
def case_a_lease_replaced_at_a_stale_version_is_a_conflict(s: Server) -> Verdict:
    group = "coordination.k8s.io/v1"
    body = {"apiVersion": group, "kind": "Lease", "metadata": {"name": "lead"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    stored = created(s, "leases", body, group=group)
    put(s, "leases", {**stored, "spec": {**stored["spec"], "holderIdentity": "b"}}, group=group)
    return put(s, "leases", {**stored, "spec": {**stored["spec"], "holderIdentity": "c"}}, group=group).verdict()


@case(422)
def case_a_lease_lasts_a_positive_number_of_seconds(s: Server) -> Verdict:
    group = "coordination.k8s.io/v1"
    body = {"apiVersion": group, "kind": "Lease", "metadata": {"name": "lead"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 0, "leaseTransitions": -1}}
    return s.send("POST", namespaced(s, "leases", group=group), body).verdict()


# ---- webhook configurations: the caBundle the reconciler keeps ----------------------------------------


def _webhooks(s: Server, kind: str, **hook: object) -> Obj:
    """A webhook configuration of one entry, never called while it exists: its objectSelector matches a
    label nothing carries, so the session's other tests (and the installed webhook) are not disturbed."""
    entry: Obj = {"name": "pods.contract.tls-injector.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                  "clientConfig": {"service": {"name": "tls-injector", "namespace": s.namespace, "path": "/mutate"}},
                  "failurePolicy": "Ignore", "rules": [
                      {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                  "objectSelector": {"matchLabels": {"contract.tls-injector.io/never": "true"}}}
    entry.update(hook)
    return {"apiVersion": ADMISSION, "kind": kind, "metadata": {"name": s.unique("contract")}, "webhooks": [entry]}


def _ca_bundle_update(s: Server, kind: str, plural: str) -> Verdict:
    path = f"/apis/{ADMISSION}/{plural}"
    stored = s.ok("POST", path, _webhooks(s, kind))
    resource = MUTATING_WEBHOOKS if kind.startswith("Mutating") else VALIDATING_WEBHOOKS
    write = decide_ca_bundle(resource, stored, bundle_pem=CA.cert_pem + OTHER_CA.cert_pem)
    assert isinstance(write, Write)
    assert write.body is not None
    reply = s.send("PUT", f"{path}/{stored['metadata']['name']}", write.body)
    wanted = write.body["webhooks"][0]["clientConfig"]["caBundle"]
    return reply.verdict(seen=[w["clientConfig"].get("caBundle") == wanted for w in reply.body.get("webhooks") or []])


@case(200)
def case_the_mutating_webhooks_ca_bundle_is_replaced(s: Server) -> Verdict:
    return _ca_bundle_update(s, "MutatingWebhookConfiguration", "mutatingwebhookconfigurations")


@case(200)
def case_the_validating_webhooks_ca_bundle_is_replaced(s: Server) -> Verdict:
    return _ca_bundle_update(s, "ValidatingWebhookConfiguration", "validatingwebhookconfigurations")


@case(422)
def case_a_webhook_name_has_three_segments(s: Server) -> Verdict:
    body = _webhooks(s, "MutatingWebhookConfiguration", name="pods.contract")
    return s.send("POST", f"/apis/{ADMISSION}/mutatingwebhookconfigurations", body).verdict()


@case(422)
def case_a_webhook_has_one_of_url_and_service(s: Server) -> Verdict:
    body = _webhooks(s, "ValidatingWebhookConfiguration",
                     clientConfig={"url": "https://example.com/v", "service": {"name": "x", "namespace": "y"}})
    return s.send("POST", f"/apis/{ADMISSION}/validatingwebhookconfigurations", body).verdict()


@case(422)
def case_a_webhook_declares_side_effects_and_review_versions(s: Server) -> Verdict:
    body = _webhooks(s, "ValidatingWebhookConfiguration", sideEffects="Unknown", admissionReviewVersions=[])
    return s.send("POST", f"/apis/{ADMISSION}/validatingwebhookconfigurations", body).verdict()


@case(409)
def case_a_ca_bundle_written_at_a_stale_version_is_a_conflict(s: Server) -> Verdict:
    path = f"/apis/{ADMISSION}/mutatingwebhookconfigurations"
    stored = s.ok("POST", path, _webhooks(s, "MutatingWebhookConfiguration"))
    write = decide_ca_bundle(MUTATING_WEBHOOKS, stored, bundle_pem=CA.cert_pem)
    assert isinstance(write, Write)
    s.ok("PUT", f"{path}/{stored['metadata']['name']}", {**stored, "metadata": {**stored["metadata"],
                                                                              "labels": {"touched": "yes"}}})
    return s.send("PUT", f"{path}/{stored['metadata']['name']}", write.body).verdict()


# ---- ClusterTrustBundles --------------------------------------------------------------------------------


def _bundle(s: Server, *certs: x509.Certificate, name: str = "", signer: str = SIGNER) -> Obj:
    spec: Obj = {"trustBundle": "".join(pem(c) for c in certs)}
    if signer:
        spec["signerName"] = signer
    default = f"{signer.replace('/', ':')}:{s.namespace}" if signer else s.unique("bundle")
    return {"apiVersion": CERTS, "kind": "ClusterTrustBundle",
            "metadata": {"name": name or default, "labels": ownership.owner_labels("bundle")}, "spec": spec}


@case(201)
def case_a_cluster_trust_bundle_of_the_signers_cas_is_created(s: Server) -> Verdict:
    return s.send("POST", f"/apis/{CERTS}/clustertrustbundles", _bundle(s, CA.cert, OTHER_CA.cert)).verdict()


@case(200)
def case_a_cluster_trust_bundle_is_replaced_at_its_resource_version(s: Server) -> Verdict:
    stored = s.ok("POST", f"/apis/{CERTS}/clustertrustbundles", _bundle(s, CA.cert))
    body = podcerts.bundle_write(stored, {**_bundle(s, CA.cert, OTHER_CA.cert)})
    assert body is not None
    return s.send("PUT", f"/apis/{CERTS}/clustertrustbundles/{stored['metadata']['name']}", body).verdict()


@case(422)
def case_a_cluster_trust_bundle_holds_only_ca_certificates(s: Server) -> Verdict:
    leaf = x509.load_pem_x509_certificates(_leaf_chain(ec.generate_private_key(ec.SECP256R1()).public_key()))[0]
    return s.send("POST", f"/apis/{CERTS}/clustertrustbundles", _bundle(s, CA.cert, leaf)).verdict()


@case(422)
def case_a_signers_bundle_is_named_after_the_signer(s: Server) -> Verdict:
    body = _bundle(s, CA.cert, name=f"other.example.com:signer:{s.namespace}")
    return s.send("POST", f"/apis/{CERTS}/clustertrustbundles", body).verdict()


@case(422)
def case_an_unsigned_bundle_has_no_signer_prefix(s: Server) -> Verdict:
    body = _bundle(s, CA.cert, signer="", name=f"contract:{s.namespace}")
    return s.send("POST", f"/apis/{CERTS}/clustertrustbundles", body).verdict()


@case(422)
def case_a_bundle_holds_at_least_one_ca(s: Server) -> Verdict:
    return s.send("POST", f"/apis/{CERTS}/clustertrustbundles", _bundle(s)).verdict()


@case(422)
def case_a_bundle_lists_each_ca_once(s: Server) -> Verdict:
    return s.send("POST", f"/apis/{CERTS}/clustertrustbundles", _bundle(s, CA.cert, CA.cert)).verdict()


# ---- PodCertificateRequests: the signer's status ---------------------------------------------------------


def _request(s: Server, key: ec.EllipticCurvePrivateKey) -> Obj:
    """A PodCertificateRequest as the kubelet makes one (the stub CSR of its key)."""
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    body = {"apiVersion": CERTS, "kind": "PodCertificateRequest", "metadata": {"name": "web-0-pcr"},
            "spec": {"signerName": SIGNER, "podName": "web-0", "podUID": "0c9e8a34-0000-4000-8000-000000000002",
                     "serviceAccountName": "default", "serviceAccountUID": "0c9e8a34-0000-4000-8000-000000000003",
                     "nodeName": "node-1", "nodeUID": "0c9e8a34-0000-4000-8000-000000000004",
                     "maxExpirationSeconds": 86_400,
                     "stubPKCS10Request": b64(csr.public_bytes(serialization.Encoding.DER))}}
    return created(s, "podcertificaterequests", body, group=CERTS)


def _leaf_chain(public_key: ec.EllipticCurvePublicKey, *, now: datetime | None = None) -> bytes:
    times = pod_cert_times(now=now or datetime.now(UTC), max_expiration_seconds=86_400,
                           issuer_not_after=CA.cert.not_valid_after_utc)
    return issue_for_key(issuer=CA, public_key=public_key, dns_names=["web.contract.svc"], times=times)


def _issue(request: Obj, key: ec.EllipticCurvePrivateKey, *, now: datetime | None = None) -> Obj:
    """The signer's status write (tls_injector.reconcile.native.podcerts.status_update) for an issued certificate."""
    when = now or datetime.now(UTC)
    times = pod_cert_times(now=when, max_expiration_seconds=86_400, issuer_not_after=CA.cert.not_valid_after_utc)
    chain = issue_for_key(issuer=CA, public_key=key.public_key(), dns_names=["web.contract.svc"], times=times)
    verdict = podcerts.Issue(chain.decode(), times.not_before, times.not_after, times.begin_refresh_at,
                             ("web.contract.svc",), "Deployment/web")
    return podcerts.status_update(request, verdict, now=datetime.now(UTC))


def _status(s: Server, body: Obj) -> Reply:
    return s.send("PUT", namespaced(s, "podcertificaterequests", body["metadata"]["name"], group=CERTS) + "/status",
                  body)


@case(200)
def case_the_signer_issues_a_pod_certificate(s: Server) -> Verdict:
    key = ec.generate_private_key(ec.SECP256R1())
    reply = _status(s, _issue(_request(s, key), key))
    return reply.verdict(seen=[c["type"] for c in (reply.body.get("status") or {}).get("conditions") or []])


@case(200)
def case_the_signer_denies_a_pod_certificate(s: Server) -> Verdict:
    request = _request(s, ec.generate_private_key(ec.SECP256R1()))
    denial = podcerts.Deny("UnsupportedKeyType", "the key is not one this signer issues for")
    return _status(s, podcerts.status_update(request, denial, now=datetime.now(UTC))).verdict()


@case(422)
def case_an_issued_status_is_final(s: Server) -> Verdict:
    key = ec.generate_private_key(ec.SECP256R1())
    issued = _status(s, _issue(_request(s, key), key)).body
    again = _issue(issued, key, now=datetime.now(UTC) - timedelta(minutes=1))
    return _status(s, again).verdict()


@case(422)
def case_a_chain_not_issued_to_the_requested_key_is_refused(s: Server) -> Verdict:
    request = _request(s, ec.generate_private_key(ec.SECP256R1()))
    return _status(s, _issue(request, ec.generate_private_key(ec.SECP256R1()))).verdict()


@case(422)
def case_a_certificate_starting_an_hour_ago_is_refused(s: Server) -> Verdict:
    key = ec.generate_private_key(ec.SECP256R1())
    return _status(s, _issue(_request(s, key), key, now=datetime.now(UTC) - timedelta(hours=1))).verdict()


@case(422)
def case_a_certificate_chain_over_100_kib_is_refused(s: Server) -> Verdict:
    key = ec.generate_private_key(ec.SECP256R1())
    body = _issue(_request(s, key), key)
    body["status"]["certificateChain"] += pem(CA.cert) * (100 * KIB // len(pem(CA.cert)) + 1)
    return _status(s, body).verdict()


def _bare_request(**spec: object) -> Obj:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    return {"apiVersion": CERTS, "kind": "PodCertificateRequest", "metadata": {"name": "bare"},
            "spec": {"signerName": SIGNER, "maxExpirationSeconds": 86_400,
                     "stubPKCS10Request": b64(csr.public_bytes(serialization.Encoding.DER)), **spec}}


@case(422)
def case_a_pod_certificate_request_names_its_pod_account_and_node(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "podcertificaterequests", group=CERTS), _bare_request()).verdict()


@case(422)
def case_a_pod_certificate_lives_an_hour_at_least(s: Server) -> Verdict:
    request = _bare_request(podName="web-0", podUID="u", serviceAccountName="default", serviceAccountUID="s",
                            nodeName="node-1", nodeUID="n", maxExpirationSeconds=3_599)
    return s.send("POST", namespaced(s, "podcertificaterequests", group=CERTS), request).verdict()


def _pkix_request() -> Obj:
    """A request as a v1beta1 kubelet makes it: the public key, and the key's signature of the pod's UID."""
    key = ec.generate_private_key(ec.SECP256R1())
    spec = {"podName": "web-0", "podUID": "u-0", "serviceAccountName": "default", "serviceAccountUID": "s",
            "nodeName": "node-1", "nodeUID": "n", **pkix_spec(key, "u-0")}
    body = _bare_request(**spec)
    del body["spec"]["stubPKCS10Request"]
    return body


@case(422)
def case_a_v1_request_sends_its_key_as_a_stub_csr_not_as_v1beta1s_fields(s: Server) -> Verdict:
    """v1 has no pkixPublicKey or proofOfPossession: dropped as unknown fields, they leave no key."""
    return s.send("POST", namespaced(s, "podcertificaterequests", group=CERTS), _pkix_request()).verdict()


@case(422)
def case_a_pod_certificate_requests_spec_is_immutable(s: Server) -> Verdict:
    stored = _request(s, ec.generate_private_key(ec.SECP256R1()))
    changed = {**stored, "spec": {**stored["spec"], "podName": "web-1"}}
    return put(s, "podcertificaterequests", changed, group=CERTS).verdict()


@case(200)
def case_a_status_write_leaves_the_spec_alone(s: Server) -> Verdict:
    key = ec.generate_private_key(ec.SECP256R1())
    body = _issue(_request(s, key), key)
    reply = _status(s, {**body, "spec": {**body["spec"], "podName": "web-1"}})
    return reply.verdict(seen=reply.body["spec"]["podName"])


# ---- the doctor --------------------------------------------------------------------------------------------


def _review(s: Server, verb: str, name: str = "") -> bool:
    """The doctor's question (tls_injector.doctor.read): may the reconciler's account do this?"""
    user = f"system:serviceaccount:{s.namespace}:reconciler"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{s.namespace}", "system:authenticated"]
    attributes = {"verb": verb, "group": "", "resource": "secrets", "namespace": s.namespace,
                  **({"name": name} if name else {})}
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
    return bool((s.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body).get("status") or {})
                .get("allowed"))


@case(201)
def case_the_doctor_asks_subject_access_reviews_answered_by_rbac(s: Server) -> Verdict:
    rbac = "rbac.authorization.k8s.io/v1"
    created(s, "roles", {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "reconciler"}, "rules": [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["web-tls"]}]}, group=rbac)
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reconciler"}
    subject = {"kind": "ServiceAccount", "name": "reconciler", "namespace": s.namespace}
    created(s, "rolebindings", {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "reconciler"},
                                "roleRef": role, "subjects": [subject]}, group=rbac)
    deadline = time.monotonic() + 10  # the real authorizer reads RBAC from an informer: a moment behind the write
    while not _review(s, "create") and time.monotonic() < deadline:
        time.sleep(0.1)
    return Verdict(201, seen=[_review(s, "create"), _review(s, "delete"), _review(s, "get", "web-tls"),
                              _review(s, "get", "other-tls"), _review(s, "get")])


# ---- names ----------------------------------------------------------------------------------------------------


def _named(s: Server, *, p: str, n: str) -> Verdict:
    plural, name = p, n
    body: Obj = {"metadata": {"name": name}}
    if plural == "services":
        body["spec"] = {"ports": [{"port": 443}]}
    if plural == "namespaces":
        reply = s.send("POST", "/api/v1/namespaces", body)
        if reply.code == 201:
            s.send("DELETE", f"/api/v1/namespaces/{name}")
        return reply.verdict()
    return s.send("POST", namespaced(s, plural), body).verdict()


NAMES = [
    ("secrets", "s" * 253, 201), ("secrets", "s" * 254, 422), ("secrets", "web.v2", 201), ("secrets", "Web", 422),
    ("secrets", "-web", 422), ("configmaps", "1web", 201),
    ("services", "1web", 201), ("services", "a" * 63, 201), ("services", "a" * 64, 422),
    ("services", "web.v2", 422), ("services", "web-", 422),
    ("namespaces", "n" * 63, 201), ("namespaces", "n" * 64, 422), ("namespaces", "a.b", 422),
]
for _plural, _name, _code in NAMES:
    CASES.append(Case(f"name-{_plural}-{_name[:12]}-{len(_name)}", _code,
                      functools.partial(_named, p=_plural, n=_name)))


@case(201)
def case_a_long_generate_name_is_cut_to_fit_63_characters(s: Server) -> Verdict:
    reply = s.send("POST", namespaced(s, "secrets"), {"metadata": {"generateName": "g" * 200 + "-"}})
    name = reply.body["metadata"]["name"]
    return reply.verdict(seen=(len(name), name[:58]))


@case(422)
def case_a_name_or_generate_name_is_required(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "secrets"), {"metadata": {}}).verdict()


# ---- labels and annotations -------------------------------------------------------------------------------------


def _marked(s: Server, *, field: str, marks: dict[str, str]) -> Verdict:
    return s.send("POST", namespaced(s, "configmaps"), meta("marked", **{field: marks})).verdict()


LABELS = [
    ({"app": "a" * 63}, 201), ({"app": "a" * 64}, 422), ({"app": "a b"}, 422), ({"app": ""}, 201),
    ({"a" * 63: "v"}, 201), ({"a" * 64: "v"}, 422), ({f"{'p' * 253}/n": "v"}, 201), ({f"{'p' * 254}/n": "v"}, 422),
    ({"Example.com/x": "v"}, 422), ({"example.com/X_y.z": "v"}, 201),
]
for _n, (_labels, _code) in enumerate(LABELS):
    CASES.append(Case(f"labels-{_n}", _code, functools.partial(_marked, field="labels", marks=_labels)))

ANNOTATIONS = [
    ({"Example.com/x": "v"}, 201), ({"example.com/" + "n" * 64: "v"}, 422), ({"a b": "v"}, 422),
    ({"example.com/note": "x" * (256 * KIB - 16)}, 201), ({"example.com/note": "x" * (256 * KIB - 15)}, 422),
]
for _n, (_notes, _code) in enumerate(ANNOTATIONS):
    CASES.append(Case(f"annotations-{_n}", _code, functools.partial(_marked, field="annotations", marks=_notes)))


@case(422)
def case_a_merge_patch_past_256_kib_of_annotations_is_refused(s: Server) -> Verdict:
    created(s, "configmaps", meta("noted", annotations={"example.com/note": "x" * (256 * KIB - 16)}))
    patch = {"metadata": {"annotations": {"b": "y"}}}
    return s.send("PATCH", namespaced(s, "configmaps", "noted"), patch, content_type=MERGE_PATCH).verdict()


@case(422)
def case_one_owner_reference_at_most_is_the_controller(s: Server) -> Verdict:
    refs = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": n, "uid": f"u-{n}", "controller": True}
            for n in ("a", "b")]
    return s.send("POST", namespaced(s, "configmaps"), meta("owned", ownerReferences=refs)).verdict()


@case(422)
def case_an_owner_reference_has_a_group_version(s: Server) -> Verdict:
    refs = [{"apiVersion": "apps/v1/x", "kind": "Deployment", "name": "web", "uid": "u"}]
    return s.send("POST", namespaced(s, "configmaps"), meta("owned", ownerReferences=refs)).verdict()


@case(422)
def case_an_owner_reference_needs_a_uid_and_a_name(s: Server) -> Verdict:
    refs = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "", "uid": ""}]
    return s.send("POST", namespaced(s, "configmaps"), meta("owned", ownerReferences=refs)).verdict()


# ---- sizes --------------------------------------------------------------------------------------------------------


def _sized_body(size: int) -> str:
    """A ConfigMap whose JSON is exactly `size` bytes."""
    body = config_map("sized", data={"a": ""})
    overhead = len(json.dumps(body))
    return json.dumps(config_map("sized", data={"a": "x" * (size - overhead)}))


@case(413)
def case_a_request_body_over_3_mib_is_refused_before_it_is_read(s: Server) -> Verdict:
    body = json.loads(_sized_body(MAX_REQUEST_BODY + 1))
    return s.send("POST", namespaced(s, "configmaps"), body).verdict()


@case(422)
def case_a_request_body_of_3_mib_is_read_and_judged(s: Server) -> Verdict:
    body = json.loads(_sized_body(MAX_REQUEST_BODY))
    return s.send("POST", namespaced(s, "configmaps"), body).verdict()


def _big_pod(name: str, size: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "a", "image": "registry.invalid/a:1", "args": ["x" * size]}]}}


@case(201)
def case_a_pod_just_under_etcds_limit_is_stored(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "pods"), _big_pod("fits", MAX_STORED_OBJECT - 4 * KIB)).verdict()


@case(500)
def case_an_object_over_etcds_limit_is_refused_by_etcd(s: Server) -> Verdict:
    reply = s.send("POST", namespaced(s, "pods"), _big_pod("huge", MAX_STORED_OBJECT))
    return reply.verdict(seen=reply.body.get("message"))


@case(422)
def case_a_pod_needs_containers(s: Server) -> Verdict:
    return s.send("POST", namespaced(s, "pods"), {"metadata": {"name": "empty"}, "spec": {"containers": []}}).verdict()


@case(422)
def case_a_json_patch_whose_test_fails_is_refused(s: Server) -> Verdict:
    created(s, "configmaps", config_map("patched", data={"a": "1"}))
    patch = [{"op": "test", "path": "/data/a", "value": "2"}, {"op": "replace", "path": "/data/a", "value": "3"}]
    return s.send("PATCH", namespaced(s, "configmaps", "patched"), patch,
                  content_type="application/json-patch+json").verdict(causes=False)


@case(200)
def case_a_strategic_merge_patch_merges_containers_by_name(s: Server) -> Verdict:
    stored = created(s, "deployments", _deployment({"app": "web"}, {"app": "web"}), group="apps/v1")
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "registry.invalid/side:1"}]}}}}
    reply = s.send("PATCH", namespaced(s, "deployments", stored["metadata"]["name"], group="apps/v1"), patch,
                   content_type="application/strategic-merge-patch+json")
    return reply.verdict(seen=[c["name"] for c in reply.body["spec"]["template"]["spec"]["containers"]])


@case(200)
def case_a_strategic_merge_patch_orders_a_merged_list_as_the_patch_does(s: Server) -> Verdict:
    body = _deployment({"app": "web"}, {"app": "web"})
    container = body["spec"]["template"]["spec"]["containers"][0]
    container.update(env=[{"name": "A", "value": "1"}], ports=[{"containerPort": 80, "name": "http"}])
    stored = created(s, "deployments", body, group="apps/v1")
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 443}]},
        {"name": "side", "image": "registry.invalid/side:1"}]}}}}
    reply = s.send("PATCH", namespaced(s, "deployments", stored["metadata"]["name"], group="apps/v1"), patch,
                   content_type="application/strategic-merge-patch+json")
    containers = reply.body["spec"]["template"]["spec"]["containers"]
    return reply.verdict(seen=([c["name"] for c in containers], [e["name"] for e in containers[0]["env"]],
                               [p["containerPort"] for p in containers[0]["ports"]]))


@case(200)
def case_finalizers_merge_as_a_set_in_the_patchs_order(s: Server) -> Verdict:
    created(s, "configmaps", meta("final", finalizers=["example.com/a"]))
    path = namespaced(s, "configmaps", "final")
    reply = s.send("PATCH", path, {"metadata": {"finalizers": ["example.com/b", "example.com/a", "example.com/c"]}},
                   content_type="application/strategic-merge-patch+json")
    s.ok("PATCH", path, {"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)  # or it never goes
    return reply.verdict(seen=reply.body["metadata"].get("finalizers"))


# ---- workloads ----------------------------------------------------------------------------------------------------


def _deployment(labels: dict[str, str], selector: dict[str, str]) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": selector}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}}}


@case(422)
def case_a_deployments_selector_matches_its_template(s: Server) -> Verdict:
    body = _deployment({"app": "web"}, {"app": "api"})
    return s.send("POST", namespaced(s, "deployments", group="apps/v1"), body).verdict()


@case(422)
def case_a_deployments_selector_is_immutable(s: Server) -> Verdict:
    stored = created(s, "deployments", _deployment({"app": "web", "tier": "a"}, {"app": "web"}), group="apps/v1")
    changed = {**stored, "spec": {**stored["spec"], "selector": {"matchLabels": {"app": "web", "tier": "a"}}}}
    # unconditional: the real deployment controller annotates a new Deployment (its revision) at once
    changed["metadata"] = {k: v for k, v in stored["metadata"].items() if k != "resourceVersion"}
    return put(s, "deployments", changed, group="apps/v1").verdict()


# ---- the test -------------------------------------------------------------------------------------------------------


@dataclass
class Pair:
    real: Server
    emulated: Server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the module's own: the contract is the apiserver's built-in behaviour, with none of
    our admission policies in the way, whatever the session's other modules installed before this one runs
    (the shipped policies refuse cluster-admin's writes of our labelled objects, rightly). ~10 s to start."""
    plane = ControlPlane(tmp_path_factory.mktemp("contract-plane"))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def admin(cluster: ControlPlane) -> kubernetes.client.ApiClient:
    return api_client(cluster.admin_kubeconfig)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    """One emulator for the module (each case has its own namespace in it), serving certificates.k8s.io/v1
    as 1.37 does, on the real clock (pod certificates are judged against the server's time)."""
    with running_emulator(seed=0, certificates=("v1",)) as api:
        yield api


@pytest.fixture
def pair(request: pytest.FixtureRequest, cluster: ControlPlane, admin: kubernetes.client.ApiClient,
         emulator: Emulator) -> Iterator[Pair]:
    name = fresh_namespace_name(request.node.callspec.id)
    servers = Pair(Server("kube-apiserver", admin, name), Server("emulator", emulator.api_client(), name))
    for server in (servers.real, servers.emulated):
        server.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    try:
        yield servers
    finally:
        for server in (servers.real, servers.emulated):
            server.cleanup()
            server.send("DELETE", f"/api/v1/namespaces/{name}")


def _needs_service_account(case_: Case) -> bool:
    return "pod" in case_.id and "certificate" not in case_.id


@pytest.mark.parametrize("case_", CASES, ids=[c.id for c in CASES])
def test_the_emulator_answers_as_the_apiserver_does(case_: Case, pair: Pair, cluster: ControlPlane) -> None:
    if _needs_service_account(case_):  # the ServiceAccount admission plugin waits for `default`
        cluster.wait_for_service_account(pair.real.namespace, "default")
    real = case_.run(pair.real)
    assert real.code == case_.expect, f"the apiserver answered {real}"
    emulated = case_.run(pair.emulated)
    assert emulated == real


def test_our_writes_are_recorded_under_our_field_manager_and_an_event_is_posted_unread(
    admin: kubernetes.client.ApiClient,
) -> None:
    """fieldManager on every write: the apiserver names us in managedFields, not the client library."""
    api = KubeApi(admin)
    namespace = fresh_namespace_name("field-manager")
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        stored = api.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"},
                                          "metadata": {"name": "written", "namespace": namespace}}, namespace=namespace)
        assert [f["manager"] for f in stored["metadata"]["managedFields"]] == [names.FIELD_MANAGER]
        updated = api.replace(CONFIG_MAPS, {**stored, "data": {"a": "2"}})
        assert [(f["manager"], f["operation"]) for f in updated["metadata"]["managedFields"]] == [
            (names.FIELD_MANAGER, "Update")]
        body = events.event_body(events.issued_ref(namespace), reason="CertificatesIssued", kind="Normal",
                                 message=events.issued_message(["Secret web-tls: certificate issued (missing)"]),
                                 now=datetime.now(UTC))
        assert api.post(EVENTS, body, namespace=namespace) is None
        [event] = api.list_objects(EVENTS, namespace=namespace).items
        assert (event["reason"], event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (
            "CertificatesIssued", "ConfigMap", names.TRUST_BUNDLE_CONFIGMAP)
        assert [f["manager"] for f in event["metadata"]["managedFields"]] == [names.FIELD_MANAGER]
    finally:
        api.delete(NAMESPACES, namespace)
