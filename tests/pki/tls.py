"""A real TLS handshake over loopback with the ssl module: a server thread and a verifying client."""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 5.0


@dataclass(frozen=True)
class Party:
    chain_pem: bytes  # what this side presents: its certificate and intermediates
    key_pem: bytes


def handshake(server: Party, *, bundle_pem: bytes, hostname: str, client: Party | None = None,
              client_ca_pem: bytes | None = None) -> str:
    """The negotiated TLS version; raises ssl.SSLError (from the client side) when the handshake fails."""
    server_ctx = _context(ssl.PROTOCOL_TLS_SERVER, server, verify_pem=client_ca_pem)
    client_ctx = _context(ssl.PROTOCOL_TLS_CLIENT, client, verify_pem=bundle_pem)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)
        thread = threading.Thread(target=_serve_once, args=(listener, server_ctx), daemon=True)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=TIMEOUT) as raw, \
                    client_ctx.wrap_socket(raw, server_hostname=hostname) as tls:
                assert tls.recv(2) == b"ok"  # a TLS 1.3 client certificate is checked after the handshake
                return str(tls.version())
        finally:
            thread.join(TIMEOUT)


def _context(protocol: int, party: Party | None, *, verify_pem: bytes | None) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if protocol == ssl.PROTOCOL_TLS_CLIENT:
        context.check_hostname = True
    if verify_pem is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=verify_pem.decode())
    if party is not None:
        with tempfile.TemporaryDirectory() as directory:
            cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert.write_bytes(party.chain_pem)
            key.write_bytes(party.key_pem)
            context.load_cert_chain(cert, key)
    return context


def _serve_once(listener: socket.socket, context: ssl.SSLContext) -> None:
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    with conn:
        conn.settimeout(TIMEOUT)
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError):
            return  # the client sees the failure; that is what the tests look at
