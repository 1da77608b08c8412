"""The C heap's remedies, where the C library is glibc (elsewhere each does nothing, by design): what the
webhook's connections leave behind, and how many heaps the reconciler's threads spread its objects over."""

from __future__ import annotations

import ctypes
import os
from typing import Any

# Memory that connections leave behind. Every TLS connection allocates outside Python's allocator
# (OpenSSL's state and record buffers, uvloop's 256 KiB read buffer) and frees it when it closes; with
# glibc, freed pages stay in the process, so even with closed connections freed promptly (tls_injector.web.http,
# HttpConnection.connection_lost) the C heap would creep with every new connection. Two remedies keep it
# flat (python -m bench.soak measures it):
# - glibc raises its mmap threshold to the size of every large block freed (up to 32 MiB), and its trim
#   threshold to twice that, so after the first connection closes the 256 KiB buffers are carved from
#   the heap too. Fixed at glibc's starting values, each is mapped and unmapped with its connection;
# - what smaller blocks free is given back by malloc_trim, at most every TRIM_SECONDS and only when
#   connections closed meanwhile (an apiserver's kept-alive connections cause none): one call holds the
#   event loop for up to about a millisecond, so it runs at most once a second.
# The constants are glibc's malloc.h.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
THRESHOLD_BYTES = 128 * 1024
TRIM_SECONDS = 1.0


class HeapTrim:
    """Gives the heap's free pages back to the system after connections closed (see above)."""

    def __init__(self, *, every: float = TRIM_SECONDS) -> None:
        self.every, self.at, self.closed = every, 0.0, 0
        self._trim = glibc_function("malloc_trim")

    def tick(self, now: float, closed: int) -> None:
        if self._trim is not None and closed != self.closed and now - self.at >= self.every:
            self.at, self.closed = now, closed
            self._trim(0)


def glibc_function(name: str) -> Any:
    """A function of the C library when it is glibc, else None."""
    try:
        return getattr(ctypes.CDLL(None), name) if os.confstr("CS_GNU_LIBC_VERSION") else None
    except (ValueError, OSError, AttributeError):
        return None


def fix_malloc_thresholds() -> bool:
    """Fix glibc's mmap and trim thresholds where they start, and give back what the heap holds free above
    them now; False where the C library is not glibc or the operator set a threshold in the environment
    (MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_, which glibc reads itself)."""
    mallopt, trim = glibc_function("mallopt"), glibc_function("malloc_trim")
    if mallopt is None or trim is None or {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"} & os.environ.keys():
        return False
    fixed = all(mallopt(option, THRESHOLD_BYTES) for option in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD))
    trim(0)
    return fixed


# The reconciler's threads (a watch per resource, the writers of a pass, the operator port) each get a
# glibc heap of their own ("arena") when they first allocate, until there are eight per core. What a
# thread decodes lands in its arena: the Secrets the writers' answers bring, which the
# cache then holds for good, and the watch events the informers read and drop. Spread over a dozen
# arenas, the long-lived blocks keep each arena's freed pages from going back. Two arenas are enough
# for threads that take turns at the GIL: on kube-apiserver at 10,000 workloads (bench.reconcile_live,
# one run each) the reconciler's peak was 208 MiB uncapped, 178-179 MiB capped at two (this call, or
# MALLOC_ARENA_MAX=2) and 171-175 MiB at one, first convergence 34-37 s in all: one arena saves no more
# than runs differ by, and two leave the threads that release the GIL (TLS, sockets) a heap to share
# rather than a lock to wait on. The constant is glibc's malloc.h.
M_ARENA_MAX = -8
ARENAS = 2


def cap_malloc_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` glibc heaps from now on (call it before threads start); False where the C library is
    not glibc or the operator set MALLOC_ARENA_MAX, which glibc reads itself."""
    mallopt = glibc_function("mallopt")
    if mallopt is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(mallopt(M_ARENA_MAX, arenas))
