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
