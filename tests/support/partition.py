"""A loopback TCP proxy that can be cut, to put one client out of reach of a server the others still reach.

Cut, it forwards nothing more on the connections it holds and accepts new ones without forwarding them:
the client sees what a network partition looks like (requests that hang until its own timeout), not a
refused connection, which would fail fast. Mended, new connections are forwarded again.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable, Iterator

# One read per turn: the emulator's answers are a few KiB; the copy size only sets how many turns it takes.
CHUNK = 64 * 1024


class Partition:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.cut = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held: list[socket.socket] = []
        # Asked of every chunk a client sends, before it is forwarded: True cuts there, so that chunk and all
        # after it are dropped. A test cuts at a given request this way, not by racing the answer before it.
        self.cut_before: Callable[[bytes], bool] | None = None
        self._thread = threading.Thread(target=self._accept, daemon=True, name="partition")

    def start(self) -> None:
        self._thread.start()

    def reset(self) -> None:
        """Every connection it holds closed: the clients' hanging requests fail at once (as after a reset)."""
        for sock in self._held:
            sock.close()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        self.reset()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(client)
            if self.cut.is_set():
                continue  # held open, never answered
            upstream = socket.create_connection(self.upstream)
            self._held.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        pairs = {client: upstream, upstream: client}
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select(list(pairs), [], [], 0.1)
            except (OSError, ValueError):  # closed by reset()
                return
            if self.cut.is_set():
                continue  # nothing crosses any more; the client waits for its own timeout
            for sock in ready:
                try:
                    data = sock.recv(CHUNK)
                except OSError:
                    return
                if not data:
                    with contextlib.suppress(OSError):
                        pairs[sock].shutdown(socket.SHUT_WR)
                    return
                if sock is client and self.cut_before is not None and self.cut_before(data):
                    self.cut.set()
                    break
                pairs[sock].sendall(data)


@contextlib.contextmanager
def partition(url: str) -> Iterator[Partition]:
    """A Partition in front of `url` (http://host:port), stopped on exit."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    found = Partition((host, int(port)))
    found.start()
    try:
        yield found
    finally:
        found.stop()
