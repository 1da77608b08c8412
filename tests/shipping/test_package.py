"""The image's build step, without Docker: the wheel built from the Docker context holds the whole app.

The Dockerfile's builder runs `pip wheel --no-deps .` on the context .dockerignore lets through; this
runs the same command on the same files, then opens the wheel: a module or data file missing there
(the built-in rules YAML, say) would make the image fail at start, not at build.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.shipping.support import ROOT


def _context(tmp: Path) -> Path:
    """The files .dockerignore admits ("*" then "!name" lines), copied as `docker build` would send them."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    context = tmp / "context"
    context.mkdir()
    for name in (line[1:].rstrip("/") for line in lines if line.startswith("!")):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / name)
    return context


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(tmp / "dist"), str(_context(tmp))],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Warning" not in result.stdout + result.stderr, "the build backend warns; builds may break later"
    return zipfile.ZipFile(next((tmp / "dist").glob("tls_injector-*.whl")))


def test_the_wheel_holds_every_module_and_data_file_of_the_app(wheel: zipfile.ZipFile) -> None:
    wanted = {str(p.relative_to(ROOT)) for p in (ROOT / "app").rglob("*")
              if p.is_file() and p.suffix in (".py", ".yaml", ".typed") and "__pycache__" not in p.parts}
    assert "app/rules/defaults.yaml" in wanted
    assert wanted <= set(wheel.namelist())


def test_the_wheel_declares_the_entry_point_and_the_dependencies_of_pyproject(wheel: zipfile.ZipFile) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "tls-injector = app.cli:main" in wheel.read(info).decode()
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    required = {_normal(line.split(": ", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert required == {_normal(d) for d in project["dependencies"]}


def _normal(requirement: str) -> tuple[str, str, frozenset[str]]:
    parsed = Requirement(requirement)
    return parsed.name.lower(), str(parsed.specifier), frozenset(parsed.extras)
