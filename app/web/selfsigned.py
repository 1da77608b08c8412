"""A throwaway CA and serving certificate so `serve` starts anywhere with no certificate given."""

from __future__ import annotations

import socket
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from app.pki import issue_leaf, make_ca


@dataclass(frozen=True)
class SelfSigned:
    ca_file: Path
    cert_file: Path
    key_file: Path


def write_self_signed(directory: Path | None, *, now: datetime, extra_dns: tuple[str, ...] = ()) -> SelfSigned:
    """Write ca.crt, tls.crt and tls.key (0600) into `directory` (a new temporary one when None)."""
    target = directory or Path(tempfile.mkdtemp(prefix="tls-injector-"))
    target.mkdir(parents=True, exist_ok=True)
    ca = make_ca(common_name="tls-injector self-signed CA", now=now, validity=timedelta(days=30))
    names = sorted({"localhost", socket.gethostname(), *extra_dns})
    leaf = issue_leaf(issuer=ca, dns_names=names, ip_addresses=("127.0.0.1", "::1"), now=now,
                      validity=timedelta(days=30))
    files = SelfSigned(target / "ca.crt", target / "tls.crt", target / "tls.key")
    files.ca_file.write_bytes(ca.cert_pem)  # the CA key is never written: it is not needed again
    files.cert_file.write_bytes(leaf.cert_pem)
    files.key_file.touch(mode=0o600)
    files.key_file.write_bytes(leaf.key_pem)
    return files
