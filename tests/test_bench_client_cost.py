"""bench.client_cost's variants and its measure, on the emulator, so the benchmark cannot rot (its figures
are taken on the real kube-apiserver, which this does not start)."""

from __future__ import annotations

from bench.client_cost import NAMESPACE, leaf_body, one_round, variants
from tests.kubeapi import Emulator
from tls_injector.kube import NAMESPACES, KubeApi


def test_each_variant_creates_leaf_shaped_secrets_and_is_measured(kubeapi: Emulator) -> None:
    api = KubeApi(kubeapi.api_client())
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    made = variants(api)
    assert set(made) == {"answer-decoded", "answer-skipped", "new-connection"}
    serial, kernel = [0], list[float]()
    for label, make in made.items():
        assert one_round(make, label, 3, serial, kernel) > 0
    assert len(kernel) == 3
    assert all(0 <= share <= 1 for share in kernel)
    stored = kubeapi.objects("secrets", NAMESPACE)
    assert len(stored) == 9
    assert all(set(s["data"]) == {"tls.crt", "tls.key", "ca.crt"} for s in stored)
    assert len(leaf_body("x")["data"]["tls.crt"]) >= 1400  # type: ignore[index]
