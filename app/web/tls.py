"""Serving TLS: a hardened server context and in-place certificate reload.

Mounted Secrets change by an atomic symlink swap, which inotify-style watchers miss, so the files are
polled by content. A new pair is used only when certificate and key both load and match; a torn update
(certificate written before its key) or a broken file keeps the old pair serving and is counted.

The listening context never changes: its SNI callback points each new handshake at the current context
(re-loading a chain into a live context breaks handshakes mid-swap). Kept-alive connections keep the
certificate they were established with, as a client expects.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tls_injector.pki.serving import ServingPairError, check_serving_pair

log = logging.getLogger("tls_injector.tls")

# TLS 1.3 suites are fixed by OpenSSL and all strong; for TLS 1.2 allow only forward-secret AEAD suites.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS"


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """TLS 1.2+ server context with the given pair; raises ssl.SSLError/OSError when it does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    # HTTP/1.1 only, said by ALPN: a client offering h2 (Go's, the apiserver's) then settles on HTTP/1.1.
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(cert_file, key_file)
    return context


@dataclass(frozen=True)
class LoadedPair:
    context: ssl.SSLContext
    fingerprint: str
    not_after: datetime


class CertReloader:
    """Holds the current serving context; `poll()` swaps it when the files' contents change."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        on_reload: Callable[[bool, LoadedPair | None], None] = lambda ok, pair: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._on_reload, self._clock = on_reload, clock
        self.current = self._first_load()
        self._listening: ssl.SSLContext | None = None
        self._failed: str | None = None

    def listening_context(self) -> ssl.SSLContext:
        if self._listening is None:
            self._listening = server_context(self.cert_file, self.key_file)
            self._listening.sni_callback = self._select_context
        return self._listening

    def poll(self) -> bool:
        """Reload when the content changed; True when a new pair is now served."""
        try:
            fingerprint = _fingerprint(*self._read())
        except OSError as error:  # a file missing mid-swap: try again at the next poll
            return self._reload_failed(None, error)
        if fingerprint in (self.current.fingerprint, self._failed):
            return False  # unchanged, or the same broken content already reported
        try:
            pair = self._load()
        except (OSError, ssl.SSLError, ValueError) as error:
            return self._reload_failed(fingerprint, error)
        self.current, self._failed = pair, None
        log.info("serving certificate reloaded", extra={"not_after": pair.not_after.isoformat()})
        self._on_reload(True, pair)
        return True

    def _reload_failed(self, fingerprint: str | None, error: Exception) -> bool:
        self._failed = fingerprint
        log.warning("serving certificate reload failed; keeping the current one", extra={"error": str(error)})
        self._on_reload(False, None)
        return False

    def _select_context(self, ssl_object: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        ssl_object.context = self.current.context

    def _first_load(self) -> LoadedPair:
        """At startup there is nothing to fall back to: any problem is a ServingPairError naming the file."""
        try:
            return self._load()
        except OSError as error:
            raise ServingPairError(f"{error.filename or self.cert_file}: cannot read: {error.strerror}") from None
        except ssl.SSLError as error:  # after the checks, only what OpenSSL alone refuses
            raise ServingPairError(f"{self.cert_file}: OpenSSL refused the pair: {error.reason}") from None

    def _read(self) -> tuple[bytes, bytes]:
        return self.cert_file.read_bytes(), self.key_file.read_bytes()

    def _load(self) -> LoadedPair:
        before = self._read()
        pair = check_serving_pair(*before, now=self._clock(), cert_name=str(self.cert_file),
                                  key_name=str(self.key_file))
        context = server_context(self.cert_file, self.key_file)
        if self._read() != before:
            raise ValueError("the certificate files changed while they were being loaded")
        return LoadedPair(context, _fingerprint(*before), pair.not_after)


def _fingerprint(cert_pem: bytes, key_pem: bytes) -> str:
    return hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
