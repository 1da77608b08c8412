"""pytest fixtures for the emulator; tests/conftest.py re-exports them so every test can ask for them."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest

from tests.kubeapi import Emulator, running_emulator


@pytest.fixture
def kubeapi() -> Iterator[Emulator]:
    """A fresh emulator per test (namespaces default, kube-system, kube-public, kube-node-lease exist)."""
    with running_emulator(seed=0) as emulator:
        yield emulator


@pytest.fixture
def kube_client(kubeapi: Emulator) -> kubernetes.client.ApiClient:
    """An official-client ApiClient pointed at the ``kubeapi`` emulator."""
    return kubeapi.api_client()


@pytest.fixture
def core(kube_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    """CoreV1Api on the emulator, with an empty namespace ``demo`` created through it."""
    api = kubernetes.client.CoreV1Api(kube_client)
    api.create_namespace({"metadata": {"name": "demo"}})
    return api
