"""What the reconciler's cache holds per object, by tracemalloc: a Deployment, a ReplicaSet and its pods as
kube-controller-manager makes them, decoded from their JSON as a watch or a list delivers them and kept as
the cache keeps them (app/reconcile/loop/cache.py).

    python -m bench.cache_shapes [--objects 10000]

Prints the bytes held per object of each kind: what the object's kept shape and everything it references
(strings, dicts) take, less what it shares with the objects kept before it. `--objects` Deployments, as
many ReplicaSets, two pods each, in namespaces of ten.
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any, cast

from tls_injector.kube import KubeApi
from tls_injector.reconcile.loop.cache import ClusterCache

Obj = dict[str, Any]


def _meta(i: int, name: str, owner: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": f"ns{i // 10}", "uid": str(uuid.uuid4()), "resourceVersion": str(1000 + i),
                 "generation": 1, "creationTimestamp": "2026-12-06T10:00:00Z", "labels": {"app": f"w{i}"}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True, "blockOwnerDeletion": True}]
    return meta


def _template(i: int, digest: str | None = None) -> Obj:
    labels = {"app": f"w{i}", "tls-injector.io/inject": "true", **({"pod-template-hash": digest} if digest else {})}
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8443}]}]}}


def objects(count: int) -> dict[str, list[bytes]]:
    """JSON bodies: `count` Deployments, their ReplicaSets, two pods each."""
    made: dict[str, list[bytes]] = {"Deployment": [], "ReplicaSet": [], "Pod": []}
    for i in range(count):
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(i, f"w{i}"),
                      "spec": {"replicas": 2, "selector": {"matchLabels": {"app": f"w{i}"}}, "template": _template(i)}}
        digest = f"{i:010x}"
        replica_set = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                       "metadata": _meta(i, f"w{i}-{digest}", deployment),
                       "spec": {"replicas": 2, "template": _template(i, digest),
                                "selector": {"matchLabels": {"app": f"w{i}", "pod-template-hash": digest}}}}
        made["Deployment"].append(json.dumps(deployment).encode())
        made["ReplicaSet"].append(json.dumps(replica_set).encode())
        for _ in range(2):
            meta = _meta(i, f"w{i}-{digest}-{uuid.uuid4().hex[:5]}", replica_set)
            template_labels = replica_set["spec"]["template"]["metadata"]["labels"]
            meta.update(generateName=f"w{i}-{digest}-", labels=dict(template_labels))
            made["Pod"].append(json.dumps({
                "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], "serviceAccountName": "default",
                         "serviceAccount": "default", "restartPolicy": "Always"},
                "status": {"phase": "Pending", "qosClass": "BestEffort"}}).encode())
    return made


def held_per_object(count: int) -> dict[str, float]:
    """Bytes held per kept object of each kind, in the order a cache meets them."""
    cache = ClusterCache(cast(KubeApi, None), on_key=lambda _: None)  # the shapes read no API
    cache._enabled = frozenset(f"ns{i // 10}" for i in range(count))  # every namespace opted in
    shapes: dict[str, Callable[[Obj], Any]] = {
        "Deployment": lambda obj: cache._workload_shape("Deployment", obj),
        "ReplicaSet": lambda obj: cache._workload_shape("ReplicaSet", obj),
        "Pod": cache._pod_shape,
    }
    bodies = objects(count)
    kept: list[Any] = []
    found = {}
    gc.collect()
    tracemalloc.start()
    try:
        for kind, shape in shapes.items():
            before = tracemalloc.get_traced_memory()[0]
            kept += [shape(json.loads(body)) for body in bodies[kind]]
            gc.collect()
            found[kind] = (tracemalloc.get_traced_memory()[0] - before) / len(bodies[kind])
    finally:
        tracemalloc.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()
    for kind, size in held_per_object(args.objects).items():
        print(f"{kind}: {size:,.0f} B held each")


if __name__ == "__main__":
    main()
