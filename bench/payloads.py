"""The AdmissionReviews the benchmarks send, built here so `bench` runs from a fresh clone.

Shaped like what the kube-apiserver sends (compact JSON, a uid per call, requestKind, dryRun present,
oldObject null on CREATE): a ReplicaSet-created Pod that opted in (so /mutate does its real work) and a
Deployment UPDATE that keeps its TLS settings and changes the image (so /validate evaluates the rule
and allows). The Pod is padded with what real pods carry (env, probes, resources, a projected token
volume) to about 4 KB, the size of a typical application pod as the apiserver serialises it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

INJECT_LABEL = "tls-injector.io/inject"
SECRET_ANNOTATION = "tls-injector.io/secret-name"


def _container(name: str, image: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "ports": [{"name": "https", "containerPort": 8443, "protocol": "TCP"}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(4)]
        + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8443, "scheme": "HTTPS"},
                           "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8443, "scheme": "HTTPS"},
                          "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
    }


def _pod_spec() -> dict[str, Any]:
    return {
        "containers": [_container("app", "registry.example/web:1.0"),
                       _container("proxy", "registry.example/proxy:2.3")],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "web",
        "serviceAccount": "web",
        "securityContext": {"fsGroup": 2000},
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300} for t in ("not-ready", "unreachable")],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}},
        ]}}],
    }


def _tls_metadata() -> tuple[dict[str, str], dict[str, str]]:
    labels = {"app": "web", "team": "payments", INJECT_LABEL: "true"}
    return labels, {SECRET_ANNOTATION: "web-tls"}


def pod_create_review() -> dict[str, Any]:
    labels, annotations = _tls_metadata()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "web-7d4b9c8f6d-",
            "labels": {**labels, "pod-template-hash": "7d4b9c8f6d"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6d",
                                 "uid": "3c5e1d2a-0000-4000-8000-000000000001", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": _pod_spec(),
        "status": {},
    }
    return _review(operation="CREATE", kind=("", "v1", "Pod"), resource="pods", obj=pod, old=None,
                   options={"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"})


def deployment_update_review() -> dict[str, Any]:
    labels, annotations = _tls_metadata()
    old: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "uid": "7a1b2c3d-0000-4000-8000-000000000002",
                     "resourceVersion": "48213", "generation": 3, "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": _pod_spec()},
        },
    }
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/web:1.1"
    return _review(operation="UPDATE", kind=("apps", "v1", "Deployment"), resource="deployments", obj=new,
                   old=old, options={"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"})


def _review(
    *, operation: str, kind: tuple[str, str, str], resource: str, obj: dict[str, Any], old: dict[str, Any] | None,
    options: dict[str, str],
) -> dict[str, Any]:
    group, version, kind_name = kind
    gvk = {"group": group, "version": version, "kind": kind_name}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "b2f6c1a0-5d3e-4c7a-9e1f-0a1b2c3d4e5f",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": obj["metadata"].get("name", ""),
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": "a0b1c2d3-0000-4000-8000-00000000beef",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
            "options": options,
        },
    }


def encoded(review: dict[str, Any]) -> bytes:
    """Compact JSON, as the apiserver sends it."""
    return json.dumps(review, separators=(",", ":")).encode()


# The apiserver's generateName draws 5 characters from these: the token volume of each pod is
# `kube-api-access-<5 of them>`, added by the ServiceAccount admission plugin before any webhook runs.
_GENERATED = "bcdfghjklmnpqrstvwxz2456789"
TOKEN_VOLUME = "kube-api-access-abcde"  # the name pod_create_review() carries


def _generated(index: int) -> str:
    return "".join(_GENERATED[(index // len(_GENERATED) ** i) % len(_GENERATED)] for i in range(5))


def replica_stream(count: int) -> list[bytes]:
    """`count` Pod CREATE reviews of one ReplicaSet's pods as the apiserver sends them during a rollout or
    scale-up: each with its own uid and its own token volume name, otherwise the same template."""
    text = encoded(pod_create_review())
    return [text.replace(b"b2f6c1a0-5d3e-4c7a-9e1f-0a1b2c3d4e5f", f"b2f6c1a0-0000-4000-8000-{i:012d}".encode())
                .replace(TOKEN_VOLUME.encode(), f"kube-api-access-{_generated(i)}".encode())
            for i in range(count)]


def template_stream(count: int) -> list[bytes]:
    """`count` Pod CREATE reviews each from a different pod template (its own ReplicaSet, image and
    token volume): no answer can be remembered from one to the next, every review is planned afresh."""
    out = []
    for i, body in enumerate(replica_stream(count)):
        template = f"{i:010x}"
        out.append(body.replace(b"7d4b9c8f6d", template.encode())
                   .replace(b"registry.example/web:1.0", f"registry.example/web:1.0.{i}".encode()))
    return out


def pod_create_review_sized_like_update() -> dict[str, Any]:
    """pod_create_review() grown, by one annotation, to the size of deployment_update_review(): /mutate and
    /validate compared for the same body size."""
    review = pod_create_review()
    missing = len(encoded(deployment_update_review())) - len(encoded(review))
    padding = '"example.com/notes":""'
    review["request"]["object"]["metadata"]["annotations"]["example.com/notes"] = "x" * (missing - len(padding) - 1)
    return review
