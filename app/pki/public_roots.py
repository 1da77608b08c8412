"""The public roots a workload may trust beside ours (names.PUBLIC_BUNDLE_KEY, issue 39 point 5).

Where they come from: the `certifi` package, the Mozilla root program's CA list as the certifi project
publishes it, versioned by date and pinned by this project's release (pyproject.toml and requirements.lock;
docs/release.md says how a release moves it). The image carries the roots of the certifi it was built
with, and the bundle ConfigMap says which (names.PUBLIC_ROOTS_SOURCE_ANNOTATION), as does `doctor`.

The roots are taken as certifi writes them, block by block (its comments left out), not parsed and
re-encoded: what a client's TLS library reads is certifi's own bytes, and a root that a future
`cryptography` refuses to parse (certifi 2026.10.18 holds one with a negative serial, which cryptography
already warns about) still reaches the clients that accept it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import certifi

_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----\r?\n?", re.DOTALL)


@dataclass(frozen=True)
class PublicRoots:
    pem: str  # every root, PEM, each once, in certifi's order
    source: str  # "certifi <version>": what the ConfigMap's annotation and doctor print
    count: int


@functools.cache
def public_roots() -> PublicRoots:
    """certifi's roots, read once per process (certifi 2026.10.18: 117 roots, 177,371 bytes of PEM)."""
    blocks = [b.rstrip("\r\n") + "\n" for b in _BLOCK.findall(certifi.contents())]
    unique = list(dict.fromkeys(blocks))
    if not unique:
        raise ValueError(f"certifi {certifi.__version__} holds no root")
    return PublicRoots("".join(unique), f"certifi {certifi.__version__}", len(unique))


def with_public_roots(bundle_pem: str) -> str:
    """Our CAs (the trust bundle's PEM) followed by the public roots: one file for SSL_CERT_FILE."""
    return bundle_pem.rstrip("\n") + "\n" + public_roots().pem
