"""Walking a JSON document: every path to a value, for tests that damage or vary one place at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def paths(value: object, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path in `value` (the root's empty path first), as tuples of keys and list indexes."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, (*prefix, index))
