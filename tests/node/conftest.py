"""The node tier: one real node (tests/node/harness.py) for the whole session, shared by its tests.

Each test works in namespaces of its own. The session's last step compares the host with what it was
before the node started (tests/node/host.py) and fails the run if anything differs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.harness import Node, own_node
from tests.node.host import HostState
from tests.node.install import Installed

# A node test waits on a kubelet, a runtime and controllers: minutes on a loaded machine at worst.
NODE_TEST_TIMEOUT_SECONDS = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT_SECONDS))
    _rotation_before_pod_certificates(items)


def _rotation_before_pod_certificates(items: list[pytest.Item]) -> None:
    """test_rotation.py runs before test_modes.py turns pod certificates on for the session's install. A CA
    leaves the bundles only once no leaf chains to it, and an issued pod certificate is such a leaf until
    the kubelet refreshes it (hours, not the test's minutes): after test_modes.py the old CA stays, as CI saw
    ("the old CA ... still in the bundle"). The product is right to wait; the test must not meet it."""
    def named(item: pytest.Item, name: str) -> bool:
        return Path(str(item.fspath)).name == name

    rotation = [item for item in items if named(item, "test_rotation.py")]
    rest = [item for item in items if not named(item, "test_rotation.py")]
    first_modes = next((k for k, item in enumerate(rest) if named(item, "test_modes.py")), None)
    if rotation and first_modes is not None:
        items[:] = rest[:first_modes] + rotation + rest[first_modes:]


@pytest.fixture(scope="session")
def host_before() -> HostState:
    return HostState.take()


@pytest.fixture(scope="session")
def node(host_before: HostState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if os.geteuid() != 0:
        pytest.fail("the node tier runs a kubelet and containerd: it needs root (as in CI)")
    with own_node(tmp_path_factory.mktemp("node"), host_before) as started:
        yield started


@pytest.fixture(scope="session")
def installed(node: Node) -> Installed:
    """tls-injector installed from its image as docs/install.md says (tests/node/install.py), once per
    session: the mission's and the lifecycle's tests share it (the lifecycle's leave it whole)."""
    return Installed(node).install()
