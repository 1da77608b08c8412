"""The mutating injector: CPU time per /mutate request, in-process (no HTTP, no TLS).

    python -m bench.mutate_cpu [--number N] [--repeat R]

Prints the median over R repeats of N calls each, in microseconds of this process's CPU time per call
(CPU time, not wall time, so other processes on a shared machine inflate the numbers less), for a Pod
CREATE of a Deployment's pod of about 4 KB (two containers and a native sidecar, env, probes, resources,
the projected service-account volume) that opts into the TLS env vars:
- `plan+patch`: plan_injection + patch_ops on the decoded pod;
- `handler`: the /mutate handler on a decoded request (plan, patch, JSON + base64 of the patch), each
  request a pod shape it has not seen (its own ReplicaSet per request, more of them than it remembers);
- `handler, replica`: the same for another replica of a template it has answered (the remembered answer);
- `decode`: the edge's one typed decode of the review (msgspec);
- `request`: decode + handler + the response's orjson.dumps: the whole request minus HTTP and TLS
  (which another benchmark measures over HTTPS), for a replica;
- `request, new shape`: the same for a pod shape it has not seen;
- `reinvocation`: the same request carrying the already injected pod (an empty plan, no patch);
- `generic diff`: copy.deepcopy + jsonpatch.make_patch of the same change, what a webhook that mutates a
  copy and diffs it would pay on top, for comparison.

Then a pod of a new shape, step by step, as the endpoint meets it (`request, new shape` in parts): the
typed decode of the review (the spec as the plan reads it, typed), the memo's key (naming inputs and that
spec as JSON, the token-volume check), the plan, the patch ops, the answer (ops as JSON, base64, and the
scan for a token volume's name that decides whether it may be shared), and the review's answer encoded.
"""

from __future__ import annotations

import argparse
import base64
import copy
import itertools
from collections.abc import Callable
from typing import Any

import jsonpatch
import orjson

from bench.timing import per_call_us
from tls_injector.admission import review_envelope
from tls_injector.injection import InjectionOptions, make_mutate_handler, patch_ops, plan_injection, pod_spec
from tls_injector.injection.answers import MAX_ENTRIES

FINGERPRINTS = ("9f86d081884c7d65", "2c26b46b68ffc68f")


def container(name: str, image: str, port: int) -> dict[str, Any]:
    return {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "https", "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(6)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": port, "scheme": "HTTPS"}, "periodSeconds": 10},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
    }


def pod(*, image: str = "registry.example/web:2.4.1", template: str = "7d4b9c8f6d") -> dict[str, Any]:
    """A Deployment's pod; `template` is its pod-template-hash (a new one: a new ReplicaSet)."""
    token_sources = [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "metadata.namespace"}}]}},
    ]
    sidecar = {**container("proxy", "registry.example/envoy:1.31", 9901), "restartPolicy": "Always"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": f"web-{template}-",
            "labels": {"app": "web", "pod-template-hash": template, "tls-injector.io/inject": "true"},
            "annotations": {"tls-injector.io/env": "NODE_EXTRA_CA_CERTS", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"web-{template}",
                                 "uid": "3c5e1d2a-0000-4000-8000-000000000001", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "initContainers": [sidecar],
            "containers": [container("app", image, 8443),
                           container("worker", "registry.example/worker:2.4.1", 8444)],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": token_sources,
                                                                        "defaultMode": 420}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "web", "securityContext": {"runAsNonRoot": True}, "schedulerName":
            "default-scheduler", "priority": 0, "enableServiceLinks": True,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
        },
    }


def review_bytes(obj: dict[str, Any]) -> bytes:
    request = {"uid": "a3c76327-9a0d-4eed-93b1-c12930c12fc6", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
               "namespace": "shop", "name": "", "object": obj, "oldObject": None, "dryRun": False,
               "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
               "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    options = InjectionOptions()
    route = make_mutate_handler(options, ca_fingerprints=lambda: FINGERPRINTS)
    body = review_bytes(pod())
    request = route.decode(body)
    ops = orjson.loads(base64.b64decode(route.handle(request)["patch"]))
    injected = jsonpatch.apply_patch(pod(), ops)
    reinvoked = review_bytes(injected)
    assert "patch" not in route.answer(reinvoked), "reinvocation must plan nothing"

    def whole(raw: bytes) -> Callable[[], bytes]:
        return lambda: orjson.dumps(review_envelope(route.answer(raw)))

    decoded_pod = pod()
    typed_spec = pod_spec(decoded_pod["spec"])

    def plan_and_patch() -> object:
        return patch_ops(plan_injection(decoded_pod["metadata"], typed_spec, options=options,
                                        ca_fingerprints=FINGERPRINTS))

    bodies = [review_bytes(pod(image=f"app:{i}", template=f"{i:010x}")) for i in range(2 * MAX_ENTRIES)]
    shapes = [route.decode(b) for b in bodies]
    unseen, unseen_bodies = itertools.cycle(shapes), itertools.cycle(bodies)

    cases: list[tuple[str, Callable[[], object], int]] = [
        ("plan+patch", plan_and_patch, args.number),
        ("handler", lambda: route.handle(next(unseen)), args.number),
        ("handler, replica", lambda: route.handle(request), args.number),
        ("decode", lambda: route.decode(body), args.number),
        ("request", whole(body), args.number),
        ("request, new shape", lambda: orjson.dumps(review_envelope(route.answer(next(unseen_bodies)))),
         args.number),
        ("reinvocation", whole(reinvoked), args.number),
        ("generic diff", lambda: jsonpatch.make_patch(copy.deepcopy(decoded_pod), injected),
         max(args.number // 10, 1)),
    ]
    steps(options, bodies, args.number, args.repeat)
    print(f"Pod CREATE review {len(body)} bytes (pod {len(orjson.dumps(decoded_pod))} bytes), "
          f"patch of {len(ops)} ops; median of {args.repeat} x {args.number} calls, CPU time per call:")
    for name, call, number in cases:
        print(f"  {name:<17} {per_call_us(call, number=number, repeat=args.repeat):8.1f} us")


def steps(options: InjectionOptions, bodies: list[bytes], number: int, repeat: int) -> None:
    """What a new shape's answer costs, step by step (each step timed alone over the same bodies)."""
    from tls_injector.admission import allowed, decode_review, decoder
    from tls_injector.injection.answers import Answer, shape_key
    from tls_injector.injection.mutate import MutateRequest, _key_text

    reviews = decoder(MutateRequest)
    requests = [decode_review(reviews, b) for b in bodies]
    pods = [r.object for r in requests if r.object is not None]
    plans = [plan_injection(p.metadata, p.spec, options=options, ca_fingerprints=FINGERPRINTS) for p in pods]
    ops = [patch_ops(plan) for plan in plans]
    answers = [Answer.of(allowed("u"), o) for o in ops]
    at = itertools.count()

    def each(call: Callable[[int], object]) -> Callable[[], object]:
        return lambda: call(next(at) % len(bodies))

    parts: list[tuple[str, Callable[[int], object]]] = [
        ("decode (typed)", lambda i: decode_review(reviews, bodies[i])),
        ("memo key", lambda i: shape_key(_key_text(pods[i].metadata, pods[i].spec, FINGERPRINTS) or b"")),
        ("plan", lambda i: plan_injection(pods[i].metadata, pods[i].spec, options=options,
                                          ca_fingerprints=FINGERPRINTS)),
        ("patch ops", lambda i: patch_ops(plans[i])),
        ("answer (JSON, b64, scan)", lambda i: Answer.of(allowed("u"), ops[i])),
        ("review answer encoded", lambda i: orjson.dumps(review_envelope(answers[i].response))),
    ]
    print(f"a new shape, step by step (median of {repeat} x {number} calls, CPU time per call):")
    for name, call in parts:
        print(f"  {name:<24} {per_call_us(each(call), number=number, repeat=repeat):8.1f} us")


if __name__ == "__main__":
    main()
