"""What the cache holds once for many objects (app/reconcile/loop/cache.py, `_shared` and `_label_set`): the CA
bundle every leaf carries, our label set, a namespace's name; held as equal values, so a pass reads the
same as from a list (tests/reconcile/test_cache.py), only not copied per object."""

from __future__ import annotations

from typing import Any

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, reconciler, small_cluster
from tls_injector.kube import KubeApi
from tls_injector.reconcile.loop import cache as cache_module
from tls_injector.reconcile.loop.cache import ClusterCache


def _filled(emu: Emulator) -> ClusterCache:
    cache = ClusterCache(KubeApi(emu.api_client()), on_key=lambda _: None)
    for informer in cache.informers:
        informer.relist()
    return cache


def _as_listed(obj: dict[str, Any]) -> dict[str, Any]:
    """As a list's item: no apiVersion or kind, and the cache keeps no managedFields."""
    kept = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return {**kept, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def test_every_leaf_holds_one_copy_of_the_ca_bundle_and_of_our_labels_and_reads_as_stored(
        kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=3, per_namespace=3)
    assert reconciler(kubeapi, Clock()).run_pass().write_count > 0
    cache = _filled(kubeapi)
    held = [cache.leaves.get(key) for key in secrets]
    assert all(leaf is not None for leaf in held)
    for (namespace, name), leaf in zip(secrets, held, strict=True):
        assert leaf == _as_listed(kubeapi.get("secrets", name, namespace))
    first = held[0]
    assert first is not None
    for leaf in held[1:]:
        assert leaf is not None
        assert leaf["data"]["ca.crt"] is first["data"]["ca.crt"]
        assert leaf["metadata"]["labels"] is first["metadata"]["labels"]
        assert leaf["data"]["tls.crt"] != first["data"]["tls.crt"]
    bundles = [cache.bundles.get((namespace, "tls-injector-trust-bundle")) for namespace, _ in secrets]
    assert all(b is not None and b["data"]["ca-bundle.crt"] is bundles[0]["data"]["ca-bundle.crt"]  # type: ignore[index]
               for b in bundles)


def test_label_sets_held_once_are_bounded_and_each_leaf_keeps_its_own_labels() -> None:
    made = []
    for n in range(cache_module.MAX_LABEL_SETS + 40):
        labels = {"app.kubernetes.io/managed-by": "tls-injector", "tls-injector.io/role": "leaf", "n": str(n)}
        secret = {"metadata": {"name": f"s{n}", "namespace": "ns", "labels": dict(labels)}, "data": {}}
        made.append((labels, cache_module._leaf_shape(secret)))
        assert len(cache_module._label_sets) <= cache_module.MAX_LABEL_SETS
    assert all(shaped["metadata"]["labels"] == labels for labels, shaped in made)
    # The same set again is the dict held, while it is one of those held.
    again = cache_module._leaf_shape({"metadata": {"name": "x", "namespace": "ns", "labels": dict(made[0][0])}})
    assert again["metadata"]["labels"] is made[0][1]["metadata"]["labels"]


def _replica_set_pods(emu: Emulator, replica_set: str, count: int, *, ns: str = "ns0") -> list[tuple[str, str]]:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set, "uid": f"uid-{replica_set}",
             "controller": True, "blockOwnerDeletion": True}
    made = []
    for n in range(count):
        name = f"{replica_set}-{n:05d}"
        emu.add({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "generateName": f"{replica_set}-",
                              "labels": {"app": replica_set, "pod-template-hash": replica_set[-5:],
                                         "tls-injector.io/inject": "true"},
                              "annotations": {"kubectl.kubernetes.io/restartedAt": "now"},
                              "ownerReferences": [dict(owner)]},
                 "spec": {"containers": [{"name": "app", "image": "example/app:1"}],
                          "serviceAccountName": "default", "serviceAccount": "default"},
                 "status": {"phase": "Pending", "qosClass": "BestEffort"}})
        made.append((ns, name))
    return made


def test_a_replica_sets_pods_hold_their_labels_owner_and_spec_once_and_read_as_each_was_sent(
        kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    first, second = _replica_set_pods(kubeapi, "web-7d4b9", 3), _replica_set_pods(kubeapi, "api-5c6d7", 2)
    cache = _filled(kubeapi)
    pods = {key: cache.pods.get(key) for key in first + second}
    for (namespace, name), held in pods.items():
        sent = kubeapi.get("pods", name, namespace)
        assert held is not None
        assert sent is not None
        assert held["metadata"]["labels"] == sent["metadata"]["labels"]
        assert held["metadata"]["ownerReferences"] == sent["metadata"]["ownerReferences"]
        assert held["metadata"]["annotations"] == {}  # none of ours
        assert held["spec"] == {"serviceAccountName": "default", "serviceAccount": "default"}
        assert held["status"] == {"phase": "Pending"}
        assert (held["metadata"]["name"], held["metadata"]["uid"]) == (name, sent["metadata"]["uid"])
    one, *siblings = (pods[key] for key in first)
    other = pods[second[0]]
    assert one is not None
    assert other is not None
    for pod in siblings:
        assert pod is not None
        for part in ("labels", "ownerReferences", "annotations"):
            assert pod["metadata"][part] is one["metadata"][part], part
        assert pod["spec"] is one["spec"]
        assert pod["status"] is one["status"]
    # Another ReplicaSet's: its own labels and owner; the spec and phase they have in common, once.
    assert other["metadata"]["labels"] is not one["metadata"]["labels"]
    assert other["metadata"]["labels"] != one["metadata"]["labels"]
    assert other["metadata"]["ownerReferences"] != one["metadata"]["ownerReferences"]
    assert other["spec"] is one["spec"]
    assert other["status"] is one["status"]


def test_parts_held_once_are_bounded_to_the_last_seen_and_an_older_one_is_held_again() -> None:
    recent = cache_module._Recent(4)
    held = [recent.flat({"n": str(n)}) for n in range(6)]
    assert recent.flat({"n": "5"}) is held[5]  # among the last four: the one held
    again = recent.flat({"n": "0"})  # dropped since: held again, equal
    assert again == held[0]
    assert again is not held[0]
    assert len(recent._held) == 4
    # What cannot be a key is kept as it came, never shared.
    odd = {"n": ["not", "a", "string"]}
    assert recent.flat(odd) is odd
    assert recent.owners([odd]) == [odd]
