"""serve keeps glibc's mmap threshold fixed, so every TLS connection's 256 KiB read buffer (uvloop's) is
mapped and unmapped with its connection instead of settling in the heap, which never shrinks back.

Checked on the allocator itself, in a fresh interpreter: after a large block is freed, glibc serves the
next one from the heap unless the threshold was fixed. (The RSS over a 10-minute soak is a benchmark,
`python -m bench.soak`, not a test.)
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import ctypes, sys
from tls_injector.web.heap import fix_malloc_thresholds
fixed = fix_malloc_thresholds() if sys.argv[1] == "fix" else False
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def mapped(block):  # glibc marks a chunk served by its own mmap with bit 2 of its size field
    return bool(ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value & 2)
# A large block freed: glibc's own threshold rises to its size. 16 MiB, not a 256 KiB buffer: imports now
# and then leave a free heap chunk of 256 KiB, which would serve the block unmapped and leave the threshold
# where it was (so later buffers were mapped without the fix: two CI runs); none of 16 MiB.
libc.free(libc.malloc(16 * 1024 * 1024))
# Then 32 connections at once. A free chunk already in the heap is handed out first whatever the
# threshold (importing frees large blocks: more when modules compile than when their .pyc is cached), so
# the first few may come from the heap either way; the last four tell the threshold.
held = [libc.malloc(256 * 1024) for _ in range(32)]
print(fixed, *(mapped(block) for block in held[-4:]))
for block in held:
    libc.free(block)
"""


def probe(mode: str, **env: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"} | env)
    return done.stdout.split()


needs_glibc = pytest.mark.skipif(not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc's allocator only")


@needs_glibc
def test_without_the_fix_buffers_come_from_the_heap_once_a_large_block_was_freed() -> None:
    assert probe("none") == ["False", "False", "False", "False", "False"]


@needs_glibc
def test_with_the_fix_every_connections_buffer_is_its_own_mapping() -> None:
    assert probe("fix") == ["True", "True", "True", "True", "True"]


@needs_glibc
def test_a_threshold_the_operator_set_in_the_environment_is_left_alone() -> None:
    assert probe("fix", MALLOC_MMAP_THRESHOLD_="1048576")[0] == "False"


def test_the_heap_is_trimmed_after_connections_closed_at_most_every_few_seconds() -> None:
    from tls_injector.web.heap import HeapTrim

    heap = HeapTrim(every=5.0)
    calls: list[int] = []
    heap._trim = calls.append  # what it would hand to glibc's malloc_trim
    heap.tick(10.0, 0)  # nothing closed yet
    heap.tick(11.0, 3)  # trimmed
    heap.tick(12.0, 9)  # more closed, but too soon
    heap.tick(17.0, 9)  # trimmed: 5 s later, and connections closed since
    heap.tick(30.0, 9)  # none closed since
    assert calls == [0, 0]
    assert (heap.at, heap.closed) == (17.0, 9)


@needs_glibc
def test_on_glibc_the_trim_is_the_c_librarys() -> None:
    from tls_injector.web.heap import HeapTrim

    assert HeapTrim()._trim is not None


class _Transport:
    """Stands in for uvloop's: it holds its protocol, as the real one does until the loop lets it go."""

    def __init__(self, protocol: object) -> None:
        self.protocol = protocol

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def abort(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def set_read_buffer_limits(self, high: int) -> None:
        pass


def test_a_closed_connection_is_freed_at_once_not_at_the_next_garbage_collection() -> None:
    # Its transport holds the TLS state (outside Python's heap); waiting for a full collection let a
    # soak's C heap swing by 12 MiB. So nothing may keep it in a reference cycle once it is closed.
    import gc
    import weakref

    from tls_injector.settings import Limits
    from tls_injector.web.connections import ConnectionSet
    from tls_injector.web.http import HttpConnection, Routes
    from tls_injector.web.metrics import ServerMetrics

    connections = ConnectionSet(Limits(), ServerMetrics())
    connection = HttpConnection(connections, Routes(admission={}, plain={}))
    transport = _Transport(connection)
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.buffer_updated(0)
    gone = weakref.ref(connection)
    enabled = gc.isenabled()
    gc.disable()
    try:
        connection.connection_lost(None)
        del connection, transport  # what the event loop lets go of once the connection is lost
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


# The reconciler's arenas (web/heap.py, cap_malloc_arenas): threads that each allocate get a glibc heap of
# their own unless capped. Counted by glibc itself: malloc_stats() writes one "Arena N:" section per heap.
ARENAS_PROBE = """
import ctypes, sys, threading
from tls_injector.web.heap import cap_malloc_arenas
capped = cap_malloc_arenas() if sys.argv[1] == "cap" else False
held, ready = [], threading.Barrier(7)
def thread():
    held.append(bytearray(64 * 1024))  # a block from malloc (over Python's small-object size), in this thread
    ready.wait()
threads = [threading.Thread(target=thread) for _ in range(6)]
for t in threads:
    t.start()
ready.wait()
print(capped, flush=True)
ctypes.CDLL(None).malloc_stats()
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", ARENAS_PROBE, mode], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env)
    return done.stdout.strip(), done.stderr.count("Arena ")


@needs_glibc
def test_the_reconcilers_threads_share_two_heaps_when_capped_and_take_one_each_when_not() -> None:
    assert arenas("cap") == ("True", 2)
    capped, count = arenas("none")
    assert capped == "False"
    assert count > 2, count


@needs_glibc
def test_an_arena_limit_the_operator_set_in_the_environment_is_left_alone() -> None:
    assert arenas("cap", MALLOC_ARENA_MAX="3") == ("False", 3)
