"""A release as docs/release.md makes it: one version (pyproject.toml's) with every copy following it, a
CHANGELOG section for it with upgrade notes, and the offline steps run as written: `python -m build`
gives an sdist and a wheel that hold the app, `helm package` a chart that renders."""

from __future__ import annotations

import re
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.shipping.install_doc import Block, blocks, run_block
from tests.shipping.support import ROOT, release_tree
from tools import release

DOC = ROOT / "docs" / "release.md"

pytestmark = pytest.mark.timeout(300)


def test_every_copy_of_the_version_is_pyprojects() -> None:
    assert release.mismatches() == []


def _tree(tmp: Path) -> Path:
    return release_tree(tmp)


def test_set_version_writes_every_copy_and_check_finds_one_left_behind(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    release.set_version("7.8.9", root)
    assert release.version(root) == "7.8.9"
    assert release.mismatches(root) == []
    chart = yaml.safe_load((root / "charts/tls-injector/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("7.8.9", "7.8.9")
    assert "image: tls-injector:7.8.9" in (root / "manifests/base/deployment.yaml").read_text()
    job = root / "certs-bootstrap/job.yaml"
    job.write_text(job.read_text().replace("tls-injector:7.8.9", "tls-injector:7.8.8"))
    assert release.mismatches(root) == ["certs-bootstrap/job.yaml: 7.8.8, not 7.8.9"]


def test_after_set_version_no_file_of_the_release_names_the_old_version(tmp_path: Path) -> None:
    """Whatever copy nobody listed in COPIES yet is found here: after set-version, the old version is
    left only in the changelog's history."""
    root = _tree(tmp_path)
    old = release.version(root)
    release.set_version("7.8.9", root)
    left = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*")) if path.is_file()
            and path.name != "CHANGELOG.md" and path.suffix not in {".tgz", ".png"}
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if re.search(rf"(?<![\d.]){re.escape(old)}(?![\d])", line)]
    assert left == []


@pytest.mark.parametrize("bad", ["1.2", "v1.2.3", "1.2.3; rm -rf /"])
def test_set_version_refuses_what_is_not_a_version(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SystemExit, match="not a version"):
        release.set_version(bad, _tree(tmp_path))


def test_the_changelog_has_the_version_and_upgrade_notes_for_every_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = text.split("\n## ")[1:]
    assert sections[0].startswith("[Unreleased]")
    assert any(s.startswith(f"[{release.version()}]") for s in sections)
    for section in sections:
        assert "\n### Upgrading\n" in section, section.splitlines()[0]


def test_every_command_block_of_the_release_doc_says_where_it_runs() -> None:
    assert len(blocks(DOC)) == DOC.read_text().count("```sh")
    assert {b.where for b in blocks(DOC)} == {"offline", "registry", "network"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _tree(tmp_path_factory.mktemp("release"))
    offline: list[Block] = [b for b in blocks(DOC) if b.where == "offline"]
    for block in offline:
        run_block(block, cwd=root, doc="docs/release.md", VERSION=release.version())
    return root / "dist"


def test_the_sdist_holds_the_project_and_the_wheel_the_app(built: Path) -> None:
    version = release.version()
    with tarfile.open(built / f"tls_injector-{version}.tar.gz") as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "LICENSE", "NOTICE", "app/__init__.py", "app/rules/defaults.yaml"} <= names
    with zipfile.ZipFile(built / f"tls_injector-{version}-py3-none-any.whl") as wheel:
        listed = set(wheel.namelist())
        metadata = wheel.read(f"tls_injector-{version}.dist-info/METADATA").decode()
    # The source folder app/ installs under the project's import name (pyproject's package-dir).
    assert {"tls_injector/__init__.py", "tls_injector/rules/defaults.yaml", "tls_injector/py.typed"} <= listed
    assert not any(name.startswith("app/") for name in listed)
    licenses = f"tls_injector-{version}.dist-info/licenses/"
    assert {licenses + "LICENSE", licenses + "NOTICE"} <= listed
    with zipfile.ZipFile(built / f"tls_injector-{version}-py3-none-any.whl") as wheel:
        assert b"Apache License" in wheel.read(licenses + "LICENSE")
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert f"\nVersion: {version}\n" in metadata
    assert "Requires-Dist: cryptography" in metadata


def test_the_chart_package_carries_the_version_and_its_schema(built: Path) -> None:
    version = release.version()
    with tarfile.open(built / f"tls-injector-{version}.tgz") as chart:
        names = set(chart.getnames())
        meta = chart.extractfile("tls-injector/Chart.yaml")
        assert meta is not None
        chart_yaml = yaml.safe_load(meta.read())
    assert {"tls-injector/values.schema.json", "tls-injector/templates/deployment.yaml"} <= names
    assert (chart_yaml["version"], chart_yaml["appVersion"]) == (version, version)


GOOD_DIGEST = "sha256:" + "ab" * 32


def test_pin_chart_sets_the_released_charts_default_image_and_nothing_else(tmp_path: Path) -> None:
    chart = release.pin_chart("registry.test.invalid:5000/platform/tls-injector", GOOD_DIGEST, tmp_path)
    image = yaml.safe_load((chart / "values.yaml").read_text())["image"]
    assert (image["repository"], image["digest"]) == ("registry.test.invalid:5000/platform/tls-injector", GOOD_DIGEST)
    source = (ROOT / "charts/tls-injector/values.yaml").read_text().splitlines()
    pinned = (chart / "values.yaml").read_text().splitlines()
    assert len(source) == len(pinned)
    assert [n for n, (a, b) in enumerate(zip(source, pinned, strict=True)) if a != b] == [7, 11]
    assert yaml.safe_load((ROOT / "charts/tls-injector/values.yaml").read_text())["image"]["digest"] == ""
    again = release.pin_chart("registry.test.invalid/p/tls-injector", "sha256:" + "cd" * 32, tmp_path)
    assert yaml.safe_load((again / "values.yaml").read_text())["image"]["digest"] == "sha256:" + "cd" * 32


@pytest.mark.parametrize(("repository", "digest"), [
    ("tls-injector", GOOD_DIGEST),  # no registry: a released chart names where its image is
    ("", GOOD_DIGEST),
    ("Registry.example/tls-injector", GOOD_DIGEST),
    ("registry.example/tls-injector:0.1.0", GOOD_DIGEST),
    (f"registry.example/tls-injector@{GOOD_DIGEST}", GOOD_DIGEST),
    ("registry.example/tls-injector\nevil: 1", GOOD_DIGEST),
    ("registry.example/tls-injector", ""),
    ("registry.example/tls-injector", "sha256:" + "ab" * 31),
    ("registry.example/tls-injector", "sha256:" + "ab" * 32 + "a"),
    ("registry.example/tls-injector", "sha256:" + "AB" * 32),
    ("registry.example/tls-injector", "sha512:" + "ab" * 64),
    ("registry.example/tls-injector", GOOD_DIGEST + "\n"),
])
def test_pin_chart_refuses_what_is_not_a_repository_and_a_digest(tmp_path: Path, repository: str, digest: str) -> None:
    with pytest.raises(SystemExit, match=r"not an image repository|not a digest"):
        release.pin_chart(repository, digest, tmp_path)
    assert not (tmp_path / "tls-injector").exists()


def test_the_release_tools_are_cached_by_version_outside_the_checkout(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    from tests.shipping.registry import release_tools

    tools = release_tools()
    monkeypatch.setenv("TLS_INJECTOR_RELEASE_TOOLS_CACHE", str(tmp_path))
    assert not tools.built()
    assert tools.main(["path"]) == 1
    for name, (package, version) in tools.TOOLS.items():
        assert tools.binary(name) == tmp_path / f"{name}-{version}" / name
        assert package.endswith(f"/cmd/{name}")
        assert version.startswith("v")
    monkeypatch.delenv("TLS_INJECTOR_RELEASE_TOOLS_CACHE")
    assert ROOT not in tools.cache_root().parents
