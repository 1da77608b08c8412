"""The trust bundle's CA fingerprints, for the record /mutate writes on each pod.

The admission path makes no API calls, so the webhook reads the bundle the reconciler mirrors, mounted
as a file, and re-reads it when it changes (polled, like the serving certificate: a ConfigMap volume
updates by symlink swap). A missing or unreadable file means no fingerprints, never a failed admission.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

from tls_injector.pki import fingerprint, load_certificates

log = logging.getLogger("tls_injector.bundle")


class BundleFingerprints:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._digest = ""
        self._fingerprints: tuple[str, ...] = ()
        self.poll()

    def __call__(self) -> Sequence[str]:
        return self._fingerprints

    def poll(self) -> bool:
        """Re-read when the content changed; True when the fingerprints changed."""
        try:
            pem = self.path.read_bytes()
        except OSError:
            pem = b""  # not mirrored yet: the record simply carries no fingerprints
        digest = hashlib.sha256(pem).hexdigest()
        if digest == self._digest:
            return False
        self._digest = digest
        fingerprints = tuple(sorted({fingerprint(cert) for cert in load_certificates(pem)}))
        changed, self._fingerprints = fingerprints != self._fingerprints, fingerprints
        if fingerprints:
            log.info("trust bundle read", extra={"path": str(self.path), "cas": len(fingerprints)})
        else:  # normal until the reconciler first mirrors it; a wrong --trust-bundle-file looks the same
            log.warning("trust bundle has no CA certificate (missing, unreadable or not PEM): injected pods "
                        "record no CA fingerprints", extra={"path": str(self.path)})
        return changed

    async def poll_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.poll()
