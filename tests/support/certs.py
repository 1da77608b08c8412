"""Certificates written to disk the way a mounted Secret presents them."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tls_injector.pki import CertKey, issue_leaf, make_ca


@dataclass(frozen=True)
class ServingFiles:
    ca_file: Path
    cert_file: Path
    key_file: Path
    ca: CertKey
    leaf: CertKey


def write_serving_pair(directory: Path, *, common_name: str = "test CA", days: int = 30) -> ServingFiles:
    """A CA and a localhost leaf, as plain files ca.crt, tls.crt and tls.key in `directory`."""
    now = datetime.now(UTC)
    ca = make_ca(common_name=common_name, now=now, validity=timedelta(days=days))
    leaf = issue_leaf(issuer=ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=now,
                      validity=timedelta(days=days))
    directory.mkdir(parents=True, exist_ok=True)
    files = ServingFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key", ca, leaf)
    files.ca_file.write_bytes(ca.cert_pem)
    files.cert_file.write_bytes(leaf.cert_pem)
    files.key_file.write_bytes(leaf.key_pem)
    return files


def swap_secret_volume(volume: Path, source: Path) -> None:
    """Publish `source`'s files the way the kubelet updates a Secret volume: one atomic symlink swap.

    The volume holds `tls.crt -> ..data/tls.crt`; `..data` points at a timestamped directory. Writing a new
    directory and renaming a new `..data` link over the old one changes both files at once.
    """
    stamp = volume / f"..{time.time_ns()}"
    stamp.mkdir(parents=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if (source / name).exists():
            (stamp / name).write_bytes((source / name).read_bytes())
    tmp_link = volume / "..data_tmp"
    tmp_link.symlink_to(stamp.name)
    os.replace(tmp_link, volume / "..data")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        link = volume / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")

