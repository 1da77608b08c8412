"""A connection flood from one address against an apiserver's kept-alive connection.

    python -m bench.flood [--connections 1200] [--per-source 250]

The real server (uvloop, TLS) in a thread on loopback with the shipped connection caps, and its head and
handshake deadlines lengthened to 120 s so a flood slower than 1,000 connections in 5 s still fills the
table. One connection from 127.0.0.1 (the apiserver) completes a review and stays kept alive; then
`--connections` TLS connections are opened from 127.0.0.2 and say nothing. Prints how many connections
the server holds, whether the kept-alive one still answers, and the server's close reasons.
`--per-source 1000` (the table's size) shows what the table does without the per-source cap.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import socket
import ssl
import tempfile
import time
from pathlib import Path

from tests.support.attack import closed, mutate_once
from tests.support.server import RunningServer, running_server
from tls_injector.settings import Limits

REASONS = ("evicted_unproven", "over_capacity", "source_over_capacity")


def connect(server: RunningServer, source: str) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=(source, 0))
    return server.client_context().wrap_socket(raw, server_hostname="localhost")


def flood(connections: int, limits: Limits) -> str:
    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp), limits=limits) as server:
        apiserver = connect(server, "127.0.0.1")
        assert mutate_once(apiserver) == 200
        held, started = [], time.monotonic()
        for _ in range(connections):
            # A connection the server closes during the handshake is counted by its reason below.
            with contextlib.suppress(OSError):
                held.append(connect(server, "127.0.0.2"))
        elapsed = time.monotonic() - started
        time.sleep(1)
        holds = len(server.server.connections.open)
        try:
            kept = f"answers {mutate_once(apiserver)}"
        except (OSError, ValueError) as error:
            kept = f"closed ({type(error).__name__})"
        reasons = ", ".join(f"{r} {closed(server, r):.0f}" for r in REASONS)
        for sock in [*held, apiserver]:
            sock.close()
        return (f"{connections} connections from one address in {elapsed:.1f} s: the server holds "
                f"{holds}; the kept-alive connection {kept}; closed: {reasons}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1200)
    parser.add_argument("--per-source", type=int, default=Limits().max_connections_per_source)
    args = parser.parse_args()
    limits = dataclasses.replace(Limits(), head_seconds=120, handshake_seconds=120,
                                 max_connections_per_source=args.per_source)
    print(flood(args.connections, limits))


if __name__ == "__main__":
    main()
