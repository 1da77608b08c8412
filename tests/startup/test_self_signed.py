"""The self-signed directory: created 0700, key 0600 whatever the umask, and no symlink followed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tls_injector.web.selfsigned import SelfSignedError, write_self_signed

NOW = datetime(2026, 11, 22, tzinfo=UTC)


@pytest.fixture(params=[0o000, 0o022, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_modes_do_not_depend_on_the_umask(tmp_path: Path, umask: int) -> None:
    files = write_self_signed(tmp_path / "new" / "certs", now=NOW)
    assert mode(tmp_path / "new" / "certs") == 0o700
    assert mode(files.key_file) == 0o600
    assert mode(files.cert_file) == mode(files.ca_file) == 0o644


def test_an_existing_open_directory_is_closed_to_others(tmp_path: Path) -> None:
    target = tmp_path / "certs"
    target.mkdir(mode=0o777)
    os.chmod(target, 0o777)
    write_self_signed(target, now=NOW)
    assert mode(target) == 0o700


def test_a_symlink_planted_at_the_key_name_is_replaced_not_followed(tmp_path: Path) -> None:
    target, victim = tmp_path / "certs", tmp_path / "victim"
    target.mkdir()
    victim.write_text("precious")
    (target / "tls.key").symlink_to(victim)
    files = write_self_signed(target, now=NOW)
    assert victim.read_text() == "precious"
    assert not files.key_file.is_symlink()
    assert files.key_file.read_bytes().startswith(b"-----BEGIN")


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(SelfSignedError, match="is a symbolic link"):
        write_self_signed(tmp_path / "link", now=NOW)
    assert list(real.iterdir()) == []


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "certs").write_text("x")
    with pytest.raises(SelfSignedError):
        write_self_signed(tmp_path / "certs", now=NOW)
