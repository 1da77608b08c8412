"""A client that pipelines requests and never reads the answers: its connection stops being read once its
unsent answers pass the write-buffer mark, so its answers cannot grow the server's memory, and the
requests it did send are answered in bounded batches, so every other client is still served at once."""

from __future__ import annotations

import contextlib
import itertools
import ssl
import threading
import time
from pathlib import Path

from tests.support.attack import mutate_once, thread_cpu_clock, tls_connect
from tests.support.server import running_server
from tls_injector.web.http import WRITE_BUFFER_HIGH

PIPELINED = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 256  # 9 KB of requests, each answered with ~10 KB


def flood(sock: ssl.SSLSocket, stop: threading.Event, sent: list[int]) -> None:
    """Write pipelined requests until the server stops reading them (the send blocks) or told to stop."""
    sock.settimeout(0.5)
    while not stop.is_set():
        try:
            sock.sendall(PIPELINED)
        except (TimeoutError, ssl.SSLError, OSError):
            return  # the server's reading is paused and the kernel buffers are full: the send blocked
        sent[0] += len(PIPELINED)


def test_a_client_that_never_reads_is_paused_and_every_other_client_is_served(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, tls_connect(server) as greedy, tls_connect(server) as other:
        stop, sent = threading.Event(), [0]
        writer = threading.Thread(target=flood, args=(greedy, stop, sent), daemon=True)
        writer.start()
        loop_cpu = thread_cpu_clock(server.thread)
        marks = [loop_cpu()]
        started = time.monotonic()
        while time.monotonic() - started < 3:
            assert mutate_once(other) == 200
            marks.append(loop_cpu())
        stop.set()
        writer.join(timeout=5)
        buffered = [c.transport.get_write_buffer_size() for c in list(server.server.connections.open)
                    if c.transport is not None]
        paused = [c.reading_paused for c in list(server.server.connections.open)]
        with contextlib.suppress(OSError):
            greedy.close()
    # The other client was answered throughout (each review is one batch's worth beside the greedy one's):
    # counted in the CPU the loop spent between two of its answers, which a loaded machine does not stretch
    # as it does wall time (a 1 s wall-clock bound failed under three CPU burners). A batch costs the loop
    # under 20 ms; 0.25 s is over ten times that.
    held = sorted(later - earlier for earlier, later in itertools.pairwise(marks))
    assert held[-1] < 0.25, held[-5:]
    # Reading stopped: what the greedy client got written is bounded by the kernel's socket buffers
    # (a few MB), not by the 3 s it had; unpaused, the server read and answered ~100 MB meanwhile.
    assert sent[0] < 32 * 1024 * 1024, sent[0]
    assert any(paused)
    # And what waits to be sent to it is the mark plus at most one batch of answers.
    assert max(buffered) < WRITE_BUFFER_HIGH + 16 * 64 * 1024, buffered
