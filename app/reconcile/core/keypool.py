"""RSA keys made ahead of need on a thread of their own, so the loop's thread never waits for one
(docs/reconcile.md, "One namespace per turn").

An RSA-4096 key costs ~0.3 s of CPU (median here; single ones several times that), RSA-3072 0.09-0.25 s:
made inline, one key is a piece of the loop no budget can cut (budget.py charges it only after). The
cryptography library releases the interpreter while OpenSSL searches for primes (measured here: a thread
counting beside an RSA-4096 generation kept half its pace on a loaded 2-core machine), so a thread of its
own makes them while the loop goes on. A certificate whose key is not ready is left for a later turn
(objects.Deferred), and the loop takes its namespace again when the next key is made. The ECDSA and Ed25519
keys (under 0.2 ms) are made inline as before.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from tls_injector.names import KEY_ALGORITHMS
from tls_injector.pki import KeyType, PrivateKey, generate_key

SLOW: frozenset[KeyType] = frozenset(a for a in KEY_ALGORITHMS if a.startswith("rsa-"))
# Keys of each slow algorithm held ready: four RSA-4096 are ~1.2 s of one core, more than a turn's worth
# (budget.py: 0.5 s), so a namespace that waits for keys takes several at each turn; and at most 4 x 3
# unused private keys sit in the leader's memory, which already holds the CA keys.
DEPTH = 4
# An algorithm nobody asked a key of for this long is no longer made ahead (the keys made stay until taken).
WANTED_SECONDS = 60.0


def _generate(key_type: KeyType) -> PrivateKey:
    return generate_key(key_type)  # looked up at the call: a test may put a slow one in its place


class KeyPool:
    """Fresh keys of the slow algorithms, each handed out once; the others made at the call."""

    def __init__(self, *, depth: int = DEPTH, make: Callable[[KeyType], PrivateKey] | None = None,
                 clock: Callable[[], float] = time.monotonic, on_ready: Callable[[], None] = lambda: None) -> None:
        self._depth = depth
        self._make = make or _generate
        self._clock = clock
        self._on_ready = on_ready
        self._ready: dict[KeyType, deque[PrivateKey]] = {}
        self._asked: dict[KeyType, float] = {}
        self._cond = threading.Condition()

    def take(self, key_type: KeyType) -> PrivateKey | None:
        """A fresh key of `key_type`; None when it is a slow one and none is ready (one is being made)."""
        if key_type not in SLOW:
            return self._make(key_type)
        with self._cond:
            self._asked[key_type] = self._clock()
            ready = self._ready.get(key_type)
            key = ready.popleft() if ready else None
            self._cond.notify()
        return key

    def has_ready(self) -> bool:
        with self._cond:
            return any(self._ready.values())

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: make a key of each slow algorithm asked for lately, up to `depth` of each."""
        while not stop.is_set():
            with self._cond:
                wanted = self._wanted()
                if wanted is None:
                    self._cond.wait(timeout=1.0)
                    continue
            key = self._make(wanted)  # outside the lock: the loop may take what is ready meanwhile
            with self._cond:
                self._ready.setdefault(wanted, deque()).append(key)
            self._on_ready()

    def _wanted(self) -> KeyType | None:
        now = self._clock()
        return next((key_type for key_type, at in self._asked.items()
                     if now - at < WANTED_SECONDS and len(self._ready.get(key_type, ())) < self._depth), None)
