"""The open connections of one admission server: their caps, the sweeper of their deadlines, and the drain.

A connection (tls_injector.web.http.HttpConnection) joins the set when its handshake completes and leaves it
however it ends. The set holds what connections share: the caps on their number, in all and per source
address (`admit`, with the eviction of a connection that has not yet completed a request); the deadlines
of every phase, checked by one sweeper task (`sweep`) rather than a timer per request; the buffer every
connection reads into; and the server's shutdown (`drain`, then `close_idle`: answers close their
connections, idle ones close once idle long enough).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tls_injector.settings import Limits
from tls_injector.web.metrics import ServerMetrics

if TYPE_CHECKING:
    from tls_injector.web.http import HttpConnection


# Connection phases; each has its own deadline (set by the connection, enforced by `ConnectionSet.sweep`).
NEW, HEAD, BODY, IDLE, LINGER = "new", "head", "body", "idle", "linger"


# Decrypted bytes are read into one buffer that every connection of a server shares: a read is handed to
# the parser at once and never kept (the parser copies what it passes on), so one buffer is enough. A read
# into a fresh bytes object instead cost three system calls per request (mmap, mremap, munmap: a buffer of
# 256 KiB is an mmap of its own). Its size bounds what one read can queue: every request of a read is
# parsed before the connection's reading pauses, so a client pipelining tiny requests and reading nothing
# left ~7,500 of them (~1.3 MiB) waiting per connection with 256 KiB; 16 KiB is one full TLS record (a
# review of the bench is one) and at most ~470 such requests (~85 KiB). A larger body takes more reads, a
# Python call each (~1 us) beside the 16 KiB decrypted for it.
READ_BUFFER_BYTES = 16 * 1024


def source_of(peername: object) -> str:
    """The client's address without its port: what the per-source cap counts. An IPv4 address seen
    through an IPv6 socket (::ffff:a.b.c.d) is the IPv4 address, so one client is one source either way."""
    if not isinstance(peername, tuple) or not peername:
        return ""
    host = str(peername[0])
    return host[7:] if host.startswith("::ffff:") and "." in host else host


class ConnectionSet:
    """The open connections of one server, their caps (in all and per source address), the sweeper that
    enforces deadlines, and the buffer connections read into.

    When the table is full, a newcomer may take the slot of a connection that has not completed a request
    (a client that connected and said nothing, or is still trickling its first head), and only one from
    the source holding the most connections, when that source holds more than the newcomer's would: a
    flood from one address then displaces only itself. A connection that has completed a request (the
    apiserver's kept-alive connections) is never closed to make room for one that has not sent a request
    yet; with no such slot to take the newcomer is closed instead.
    """

    def __init__(self, limits: Limits, metrics: ServerMetrics) -> None:
        self.limits, self.metrics = limits, metrics
        self.open: set[HttpConnection] = set()
        self.by_source: dict[str, set[HttpConnection]] = {}
        self.closed = 0  # connections ended so far, however they ended
        self.draining = False
        self.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))

    def admit(self, connection: HttpConnection) -> bool:
        if self.draining:  # its handshake finished after the listener closed
            return self._refuse("shutdown")
        held = len(self.by_source.get(connection.source, ()))
        if held >= self.limits.max_connections_per_source:
            return self._refuse("source_over_capacity")
        if len(self.open) >= self.limits.max_connections:
            victim = self._unproven_of_heaviest(held)
            if victim is None:
                return self._refuse("over_capacity")
            victim.abort("evicted_unproven")
        self.open.add(connection)
        self.by_source.setdefault(connection.source, set()).add(connection)
        return True

    def _refuse(self, reason: str) -> bool:
        self.metrics.connections_closed.labels(reason).inc()
        return False

    def _unproven_of_heaviest(self, held: int) -> HttpConnection | None:
        """The oldest connection without a completed request of the source holding the most connections,
        if that source holds at least two more than the newcomer's (so the swap never makes it the lighter)."""
        heavy = sorted((c for c in self.by_source.values() if len(c) > held + 1), key=len, reverse=True)
        for connections in heavy:
            unproven = [c for c in connections if not c.served and c.phase in (NEW, HEAD)]
            if unproven:
                return min(unproven, key=lambda c: c.started)
        return None

    def forget(self, connection: HttpConnection) -> None:
        self.open.discard(connection)
        same = self.by_source.get(connection.source)
        if same is not None:
            same.discard(connection)
            if not same:
                del self.by_source[connection.source]

    def sweep(self, now: float) -> None:
        for connection in [c for c in self.open if c.deadline <= now]:
            connection.expire()

    def drain(self) -> None:
        """Stop keeping connections alive: every answer from now on says `Connection: close` and closes its
        connection; idle ones close once idle long enough (`close_idle`)."""
        self.draining = True

    def close_idle(self, now: float, idle_for: float) -> None:
        """Close the connections idle for at least `idle_for` seconds (no request begun since).

        Closing an idle keep-alive connection races with a client sending on it, and a client does not
        retry a POST that met a closed connection: the apiserver fails the admission ("broken pipe",
        "EOF"). A connection it uses again gets its answer with `Connection: close` and ends cleanly; one
        idle for a while sits at the bottom of Go's idle pool (the most recently used is reused first),
        so closing only those leaves the race to a request burst arriving at that instant."""
        for connection in list(self.open):
            if connection.phase in (IDLE, NEW) and now - connection.idle_since() >= idle_for:
                connection.abort("shutdown")

