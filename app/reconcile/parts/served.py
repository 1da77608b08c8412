"""Connect to the webhook as the API server does and take the certificate chain it serves: for the
reconciler's check after each pass and for `tls-injector doctor`.

The handshake verifies nothing itself: the chain is verified afterwards against each entry's caBundle
(tls_injector.reconcile.parts.webhook_plan.entry_trust_problem), which is the question asked, and a handshake that
refused an untrusted server would only say "no" without saying why.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any

# A webhook answers a handshake in milliseconds; the apiserver itself gives a call 10 s in all. 5 s is
# generous for a port-forward, and a doctor run never hangs on a black-holed address for long.
CONNECT_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Served:
    """The outcome of connecting to the webhook as the API server would: the chain it served, or why not."""

    address: str
    server_name: str
    chain_pem: bytes = b""
    error: str = ""
    explicit: bool = False  # the address was given (so failing to connect is a finding, not a limitation)


def fetch_served(host: str, port: int, *, server_name: str, explicit: bool,
                 timeout: float = CONNECT_TIMEOUT_SECONDS) -> Served:
    address = f"{host}:{port}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False  # verified afterwards, per entry, against its caBundle
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=server_name) as tls:
            chain = _served_chain(tls)
    except (OSError, ssl.SSLError, ValueError) as e:
        return Served(address, server_name, error=f"{type(e).__name__}: {e}", explicit=explicit)
    return Served(address, server_name, chain_pem=chain, explicit=explicit)


def _served_chain(tls: ssl.SSLSocket) -> bytes:
    """Every certificate the server sent, as PEM; the leaf alone where the chain is not exposed.

    `get_unverified_chain` is public from Python 3.13 and present on the underlying object since 3.10;
    the webhook's own certificates are issued straight by a CA in caBundle, so the leaf alone verifies.
    """
    source: Any = tls if hasattr(tls, "get_unverified_chain") else getattr(tls, "_sslobj", None)
    getter = getattr(source, "get_unverified_chain", None)
    if getter is not None:
        return "".join(cert.public_bytes() for cert in getter() or []).encode()
    der = tls.getpeercert(binary_form=True)
    if not der:
        raise ValueError("the server sent no certificate")
    return ssl.DER_cert_to_PEM_cert(der).encode()
