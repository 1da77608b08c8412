"""The loop's keys made ahead (app/reconcile/core/keypool.py): RSA keys on a thread of their own, each handed out
once; the fast algorithms made at the call; a slow one not ready is None (its certificate waits a turn),
and the namespace waiting for it hears when one is made."""

from __future__ import annotations

import threading
import time

from tls_injector import names
from tls_injector.pki import PrivateKey, generate_key, key_type_of
from tls_injector.pki.keys import KeyType
from tls_injector.reconcile.core.keypool import DEPTH, SLOW, KeyPool


def _made_by(log: list[tuple[KeyType, str]], readied: list[None] | None = None) -> KeyPool:
    def make(key_type: KeyType) -> PrivateKey:
        log.append((key_type, threading.current_thread().name))
        return generate_key("ecdsa-p256" if key_type in SLOW else key_type)  # fast: the pool's logic is tested
    return KeyPool(make=make, on_ready=lambda: (readied if readied is not None else []).append(None))


def test_fast_algorithms_are_made_at_the_call_and_slow_ones_ahead_on_the_pools_thread() -> None:
    log: list[tuple[KeyType, str]] = []
    readied: list[None] = []  # one entry per key put in the pool (its on_ready), after it is takeable
    pool = _made_by(log, readied)
    for algorithm in names.KEY_ALGORITHMS:
        if algorithm not in SLOW:
            key = pool.take(algorithm)
            assert key is not None
            assert key_type_of(key.public_key()) == algorithm
    assert all(thread == threading.current_thread().name for _, thread in log)
    log.clear()
    assert pool.take("rsa-4096") is None  # none ready: asked for, made on the pool's thread
    stop = threading.Event()
    threading.Thread(target=pool.run, args=(stop,), name="keys", daemon=True).start()
    try:
        deadline = time.monotonic() + 10
        # `make` logs before it makes a key; the pool holds it only after: wait for the pool's word, not the log
        while len(readied) < DEPTH and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert log == [("rsa-4096", "keys")] * DEPTH  # topped up to DEPTH, no more
        assert len(readied) == DEPTH
        taken = [pool.take("rsa-4096") for _ in range(DEPTH)]
        assert all(k is not None for k in taken)
        assert len({id(k) for k in taken}) == DEPTH  # each handed out once
        assert pool.take("rsa-3072") is None  # another algorithm: asked for in its turn
    finally:
        stop.set()


def test_an_algorithm_nobody_asks_for_is_not_made() -> None:
    log: list[tuple[KeyType, str]] = []
    pool = _made_by(log)
    stop = threading.Event()
    threading.Thread(target=pool.run, args=(stop,), daemon=True).start()
    time.sleep(0.3)
    stop.set()
    assert log == []
    assert not pool.has_ready()
