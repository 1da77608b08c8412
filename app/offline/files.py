"""Reading the files the offline tools are given: one way to find them, one way to fail."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from tls_injector.offline.errors import InputError

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "<stdin>"


def manifest_files(location: Path) -> list[Path]:
    """A file as given, or every *.yaml, *.yml and *.json under a directory, recursively, sorted."""
    if not location.is_dir():
        return [location]
    return sorted(p for p in location.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())


def read_text(path: Path) -> str:
    """The file's text (UTF-8), or an InputError naming it and saying why in one line."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise unreadable(str(path), error) from None


def read_stdin(stdin: TextIO) -> str:
    try:
        return stdin.read()
    except (OSError, UnicodeDecodeError) as error:
        raise unreadable(STDIN, error) from None


def unreadable(name: str, error: OSError | UnicodeDecodeError) -> InputError:
    if isinstance(error, UnicodeDecodeError):
        reason = f"not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
    else:
        reason = error.strerror or str(error)
    return InputError(f"{name}: cannot read: {reason}")
