"""The cluster tier: one real control plane for the whole session (tests/cluster/controlplane.py).

Starting it costs 15-60 s, so it is shared; each test works in namespaces of its own, named after it,
and the few tests that change cluster-wide objects (webhook configurations, policies) restore them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from tests.cluster.controlplane import ControlPlane, api_client
from tests.cluster.install import Installation

# A test here waits on real controllers (a ReplicaSet's pods, a namespace's deletion, a reconciler's
# pass): minutes on a loaded machine, not the unit tests' 60 s. The control plane's own start is paid
# by the first test that asks for it.
CLUSTER_TEST_TIMEOUT_SECONDS = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(CLUSTER_TEST_TIMEOUT_SECONDS))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def admin(cluster: ControlPlane) -> kubernetes.client.ApiClient:
    """cluster-admin through the official client."""
    return api_client(cluster.admin_kubeconfig)


@pytest.fixture(scope="session")
def installed(cluster: ControlPlane, admin: kubernetes.client.ApiClient,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    """The shipped install, applied and running: bootstrap run once, the reconciler and the webhook up."""
    install = Installation(cluster, admin, tmp_path_factory.mktemp("install"))
    try:
        install.apply_manifests()
        install.bootstrap_result = install.bootstrap()
        install.start_reconciler()
        install.start_webhook()
        yield install
    finally:
        install.stop_all()
