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


DELETE = object()  # as a replacement: remove the value instead


def damage(document: Any, path: tuple[Any, ...], replacement: object) -> None:
    """Put `replacement` at `path` (or delete it); a path an earlier damage removed is left alone."""
    try:
        for key in path[:-1]:
            document = document[key]
        if replacement is DELETE:
            del document[path[-1]]
        else:
            document[path[-1]] = replacement
    except (KeyError, IndexError, TypeError):
        return
