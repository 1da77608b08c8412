"""One running scene (tests/operator/scene.py) shared by the tests of this module that only read it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubeapi import running_emulator
from tests.operator.scene import Scene, running_scene


@pytest.fixture(scope="module")
def scene() -> Iterator[Scene]:
    with running_emulator(seed=0) as emulator, running_scene(emulator) as running:
        yield running
