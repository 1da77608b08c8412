"""Fixtures shared by every test package."""

import logging
from collections.abc import Iterator

import pytest

from tests.kubeapi.fixtures import core, kube_client, kubeapi

__all__ = ["core", "kube_client", "kubeapi", "logging_as_found"]


@pytest.fixture(autouse=True)
def logging_as_found() -> Iterator[None]:
    """The root logger's handlers and level put back after each test. A test that runs a command configures
    logging to the stderr of that moment, which pytest captures and closes when the test ends; a handler
    left bound to it turns any later log (a thread of an earlier test still ending) into "--- Logging error
    ---" on whatever test's stderr is captured then."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
