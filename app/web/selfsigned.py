"""A throwaway CA and serving certificate so `serve` starts anywhere with no certificate given.

The directory may be one a user names (`--self-signed-dir`), so nothing here follows a symlink: a link
planted at the directory or at a file name could otherwise make the server write its private key
wherever the link points. The directory is created 0700 and the key 0600 whatever the umask.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from tls_injector.pki import issue_leaf, make_ca

DIR_MODE = 0o700
KEY_MODE = 0o600
PUBLIC_MODE = 0o644


class SelfSignedError(Exception):
    """The self-signed directory cannot be used safely; one line naming the path."""


@dataclass(frozen=True)
class SelfSigned:
    ca_file: Path
    cert_file: Path
    key_file: Path


def write_self_signed(directory: Path | None, *, now: datetime, extra_dns: tuple[str, ...] = ()) -> SelfSigned:
    """Write ca.crt, tls.crt and tls.key (0600) into `directory` (a new temporary one when None)."""
    target = _safe_directory(directory) if directory else Path(tempfile.mkdtemp(prefix="tls-injector-"))
    ca = make_ca(common_name="tls-injector self-signed CA", now=now, validity=timedelta(days=30))
    names = sorted({"localhost", socket.gethostname(), *extra_dns})
    leaf = issue_leaf(issuer=ca, dns_names=names, ip_addresses=("127.0.0.1", "::1"), now=now,
                      validity=timedelta(days=30))
    files = SelfSigned(target / "ca.crt", target / "tls.crt", target / "tls.key")
    _write(files.ca_file, ca.cert_pem, PUBLIC_MODE)  # the CA key is never written: it is not needed again
    _write(files.cert_file, leaf.cert_pem, PUBLIC_MODE)
    _write(files.key_file, leaf.key_pem, KEY_MODE)
    return files


def _safe_directory(directory: Path) -> Path:
    if directory.is_symlink():
        raise SelfSignedError(f"{directory}: --self-signed-dir is a symbolic link; give a real directory")
    try:
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        info = directory.lstat()
    except OSError as error:
        raise SelfSignedError(f"{directory}: cannot create --self-signed-dir: {error.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise SelfSignedError(f"{directory}: --self-signed-dir is not a directory")
    os.chmod(directory, DIR_MODE)  # mkdir's mode is cut by the umask, and an existing dir keeps its own
    return directory


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with a new file of `mode`, never following a link planted at that name."""
    try:
        if path.is_symlink() or path.exists():
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except OSError as error:
        raise SelfSignedError(f"{path}: cannot write: {error.strerror}") from None
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), mode)  # the umask may have cut the mode given to open
        handle.write(data)
