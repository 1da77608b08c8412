"""Remembered results: a group of rules' CEL results by the exact JSON bytes of its `oldSelf` and `self`.

Exact, not a heuristic: CEL is a pure function of its variables, and the key is an injective encoding
of the values the rules see (see `Memo.key`), so a remembered result is the result the evaluation
would give. It pays because the same pair recurs: one rollout sends a workload's UPDATE for the new
image and another for the controller's revision annotation, both with the same pod-template metadata;
a hit costs ~1 us against ~17 us for converting and evaluating the built-in workload rules.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict

import orjson

from tls_injector.rules.paths import MISSING

# Entries per group of rules. A burst of updates to one workload hits; past this many distinct pairs
# the least recently used goes first, so a caller sending ever-new values costs a miss, never memory.
MEMO_ENTRIES = 512
# Both values' JSON together at most this many bytes: a pod template's metadata is 100-500 bytes (its
# labels and a few annotations), so nearly every real pair fits, and a full memo holds ~1 MiB of keys.
MEMO_KEY_BYTES = 2048

Key = tuple[bytes, bytes]
# Subclasses of dict, list, str and int, dataclasses and datetimes are refused rather than written as
# their JSON look-alikes: CEL may see them differently.
_EXACT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


class Memo:
    """Least-recently-used results, bounded in entries and in key bytes."""

    def __init__(self, *, entries: int = MEMO_ENTRIES, key_bytes: int = MEMO_KEY_BYTES) -> None:
        self.entries, self.key_bytes = entries, key_bytes
        self._results: OrderedDict[Key, tuple[bool, ...]] = OrderedDict()

    def key(self, old: object, new: object) -> Key | None:
        """The two values as JSON bytes, or None when those cannot stand for them.

        orjson writes each str, int, float, bool and key order distinctly (1, 1.0 and true stay three
        keys), and refuses what is not JSON (other types, non-str keys, integers past 64 bits, nesting past
        254 levels). Its one collision is null: NaN and the infinities are written as null too, so a key
        containing null is not used. The cost is bounded by the body: dumps runs ~5x faster than the
        parse that produced the values.
        """
        try:
            key = (_json(old), _json(new))
        except orjson.JSONEncodeError:
            return None
        if len(key[0]) + len(key[1]) > self.key_bytes or b"null" in key[0] or b"null" in key[1]:
            return None
        return key

    # Each OrderedDict call is atomic under the interpreter lock, but a pair of them is not: should two
    # threads share a memo, an entry may go between two calls, which must cost a miss, not a KeyError.
    def get(self, key: Key) -> tuple[bool, ...] | None:
        results = self._results.pop(key, None)
        if results is not None:
            self._results[key] = results  # back in as the most recently used
        return results

    def put(self, key: Key, results: tuple[bool, ...]) -> None:
        self._results[key] = results
        if len(self._results) > self.entries:
            with contextlib.suppress(KeyError):  # emptied meanwhile
                self._results.popitem(last=False)

    def __len__(self) -> int:
        return len(self._results)


def _json(value: object) -> bytes:
    # An absent path gets b"", which no JSON value encodes to; it and {} are judged alike but kept apart.
    return b"" if value is MISSING else orjson.dumps(value, option=_EXACT)
