"""The reliability suite: a fast slice for CI, and `long` variants that run only with TLS_INJECTOR_LONG=1."""

from __future__ import annotations

import os

import pytest

LONG = os.environ.get("TLS_INJECTOR_LONG") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if LONG:
        return
    # Opt-in, not hidden: each long variant has a short sibling that CI runs on every change.
    opt_in = pytest.mark.skip(reason="long variant: run with TLS_INJECTOR_LONG=1")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(opt_in)
