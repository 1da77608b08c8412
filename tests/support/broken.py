"""Reviews changed in a few places and cut in a few ways: what an endpoint must answer alike with its memo
on and off.

Both memos (/mutate's answers, /validate's rule results) are tested by sending the same bodies to an endpoint
with the memo and without; these make the bodies from a good review, a list of places (key paths into it)
and values.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson
from hypothesis import strategies as st

Place = tuple[str, ...]
Cut = Callable[[bytes], bytes]


def nested(encoded: bytes, depth: int) -> bytes:
    """`encoded` with a field the decode skips, `depth` lists deep, at the head of its request."""
    return encoded.replace(b'"request":{', b'"request":{"options":' + b"[" * depth + b"]" * depth + b",", 1)


@contextlib.contextmanager
def recursion_limit(limit: int | None) -> Iterator[None]:
    """The interpreter's recursion limit set to `limit` (None: left as it is) while the block runs."""
    before = sys.getrecursionlimit()
    try:
        if limit is not None:
            sys.setrecursionlimit(limit)
        yield
    finally:
        sys.setrecursionlimit(before)


# Ways to spoil the encoded body in a field the decode skips.
CUTS: dict[str, Cut] = {
    "none": lambda encoded: encoded,
    # invalid UTF-8
    "non-ascii": lambda encoded: encoded.replace(b'"request":{', b'"request":{"userInfo":{"username":"\xff"},', 1),
    # deeper than either decoder takes
    "deep": lambda encoded: nested(encoded, 1100),
}


@st.composite
def broken(draw: st.DrawFn, good: dict[str, Any], places: Sequence[Place], odd: st.SearchStrategy[Any],
           cuts: Mapping[str, Cut] = CUTS) -> bytes:
    """`good` with one to three places dropped or set to an `odd` value, encoded, then truncated or cut."""
    body = copy.deepcopy(good)
    for place in draw(st.lists(st.sampled_from(places), min_size=1, max_size=3)):
        target = body
        for key in place[:-1]:
            target = target.get(key) if isinstance(target, dict) else None  # type: ignore[assignment]
        if isinstance(target, dict):
            if draw(st.booleans()):
                target.pop(place[-1], None)
            else:
                target[place[-1]] = copy.deepcopy(draw(odd))  # st.just gives one object each time
    encoded = orjson.dumps(body)
    cut = draw(st.sampled_from(["none", "truncate", *cuts]))
    if cut == "truncate":
        return encoded[: draw(st.integers(0, len(encoded) - 1))]
    return cuts[cut](encoded)


DROP = object()


def each_place_changed(good: dict[str, Any], places: Sequence[Place],
                       variants: Sequence[object]) -> Iterator[tuple[Place, object, bytes]]:
    """(place, value, body) for every place of `good` dropped (DROP) or set to each variant alone."""
    for place in places:
        for value in [DROP, *variants]:
            body = copy.deepcopy(good)
            target = body
            for key in place[:-1]:
                target = target[key]
            target.pop(place[-1], None) if value is DROP else target.update({place[-1]: value})
            yield place, value, orjson.dumps(body)
