"""tools/image.py's own choices, without building: where it finds the Debian mirror and pip's way to PyPI,
and what its cache key follows (tests/image/test_image.py builds and checks the image itself)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.image.oci import image_tool
from tests.shipping.support import ROOT

image = image_tool()
BASE = {"release": "bookworm", "debian": "12.15", "digest": "ab" * 32}


def test_the_mirror_is_the_one_apt_uses_for_the_release_in_either_sources_format(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TLS_INJECTOR_DEBIAN_MIRROR", raising=False)
    assert image.mirror(tmp_path) == "http://deb.debian.org/debian", "nothing configured"
    listed = tmp_path / "sources.list.d"
    listed.mkdir()
    (listed / "other.sources").write_text(
        "Types: deb\nURIs: https://example.org/apt\nSuites: nodistro\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert image.mirror(tmp_path) == "http://mirror.example/debian/"
    (tmp_path / "sources.list").write_text("# a comment\ndeb http://old.example/debian bookworm main\n")
    assert image.mirror(tmp_path) == "http://old.example/debian", "sources.list is read first"
    monkeypatch.setenv("TLS_INJECTOR_DEBIAN_MIRROR", "http://chosen.example/debian")
    assert image.mirror(tmp_path) == "http://chosen.example/debian"


def test_pips_ca_file_and_index_come_from_its_config_files_then_its_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PIP_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST"):
        monkeypatch.delenv(name, raising=False)
    ca = tmp_path / "ca.crt"
    ca.write_text("a CA\n")
    first, second = tmp_path / "first.conf", tmp_path / "second.conf"
    first.write_text(f"[global]\ncert = {ca}\nindex-url = https://first.example/simple\ntimeout = 60\n")
    second.write_text("[install]\nindex-url = https://second.example/simple\n")
    assert image.pip_settings([first, second]) == ({"index-url": "https://second.example/simple"}, ca)
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    monkeypatch.setenv("PIP_CERT", str(tmp_path / "missing.crt"))
    assert image.pip_settings([first]) == ({"index-url": "https://env.example/simple"}, None), \
        "a CA file that does not exist is not mounted"
    assert image.pip_settings([tmp_path / "absent.conf"]) == ({"index-url": "https://env.example/simple"}, None)


def test_the_cache_key_follows_the_build_context_and_the_base_but_not_bytecode(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for name in image.INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    key = image.inputs_digest(BASE, tree)
    assert image.inputs_digest(BASE, tree) == key
    (tree / "app" / "__pycache__").mkdir(exist_ok=True)
    (tree / "app" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"bytecode")
    assert image.inputs_digest(BASE, tree) == key, ".dockerignore keeps bytecode out of the context"
    assert image.inputs_digest({**BASE, "digest": "cd" * 32}, tree) != key, "another base"
    (tree / "app" / "new_module.py").write_text("")
    assert image.inputs_digest(BASE, tree) != key, "a file added to app/"
    (tree / "app" / "new_module.py").unlink()
    (tree / "tools" / "rootfs.sh").chmod(0o644)
    assert image.inputs_digest(BASE, tree) != key, "an exec bit"
    (tree / "tools" / "rootfs.sh").chmod(0o755)
    assert image.inputs_digest(BASE, tree) == key
    (tree / "requirements.lock").write_text((tree / "requirements.lock").read_text() + "\n")
    assert image.inputs_digest(BASE, tree) != key, "a lock"
