"""The image's build step, without Docker: the wheel built from the Docker context holds the whole app.

The Dockerfile's builder runs `pip wheel --no-deps .` on the context .dockerignore lets through; this
runs the same command on the same files, then opens the wheel: a module or data file missing there
(the built-in rules YAML, say) would make the image fail at start, not at build. The same wheel,
installed in a virtual environment of its own, is the command docs/install.md tells people to get.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from importlib import metadata
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
    """Every file of app/ under the installed name, and nothing else at the top level but the metadata: the
    wheel installs no `app` package to clobber (or be clobbered by) another project's."""
    wanted = {"tls_injector/" + p.relative_to(ROOT / "app").as_posix() for p in (ROOT / "app").rglob("*")
              if p.is_file() and p.suffix in (".py", ".yaml", ".typed") and "__pycache__" not in p.parts}
    assert "tls_injector/rules/defaults.yaml" in wanted
    assert wanted <= set(wheel.namelist())
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"tls_injector"}


def test_the_wheel_declares_the_entry_point_and_the_dependencies_of_pyproject(wheel: zipfile.ZipFile) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "tls-injector = tls_injector.cli:main" in wheel.read(info).decode()
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    required = {_normal(line.split(": ", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert required == {_normal(d) for d in project["dependencies"]}


def _normal(requirement: str) -> tuple[str, str, frozenset[str]]:
    parsed = Requirement(requirement)
    return parsed.name.lower(), str(parsed.specifier), frozenset(parsed.extras)


def test_the_wheel_installs_a_working_command_as_pipx_would(wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    """docs/install.md: `pipx install` from the repository gives a `tls-injector` command. pipx makes a
    virtual environment and installs the wheel into it; so does this, with the dependencies taken from the
    test environment (no index here) and the wheel's own `tls_injector` package, never this source tree."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    site = Path(subprocess.run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    # The dependencies: a path line adds the directory without running its .pth files (the editable
    # install of this tree among them).
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--no-deps",
                              "--no-index", "--disable-pip-version-check", "-q", str(wheel.filename)],
                             capture_output=True, text=True, check=False, timeout=120)
    assert install.returncode == 0, install.stdout + install.stderr

    def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path,
                              env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})

    version = metadata.version("tls-injector")
    command = run(bin_dir / "tls-injector", "--version")
    assert (command.returncode, command.stdout.strip()) == (0, f"tls-injector {version}"), command.stderr
    module = run(bin_dir / "python", "-m", "tls_injector", "--version")
    assert (module.returncode, module.stdout.strip()) == (0, f"tls-injector {version}"), module.stderr
    where = run(bin_dir / "python", "-c", "import tls_injector; print(tls_injector.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr
    helped = run(bin_dir / "tls-injector", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: tls-injector "), helped.stdout
    assert ("{serve,check,export-policy,reconcile,bootstrap,inject,doctor,status,renew,version,completion}"
            in helped.stdout)
    # The completion script comes from shtab, a runtime dependency the wheel must bring.
    completion = run(bin_dir / "tls-injector", "completion", "bash")
    assert completion.returncode == 0, completion.stderr
    assert "complete -o bashdefault -F _shtab_tls_injector tls-injector" in completion.stdout
    versions = run(bin_dir / "tls-injector", "version", "-o", "yaml")
    assert (versions.returncode, versions.stdout.splitlines()[0]) == (0, f"version: {version}"), versions.stderr
    # A command that loads the rules, CEL and YAML from the installed package, data file included.
    policies = run(bin_dir / "tls-injector", "export-policy")
    assert policies.returncode == 0, policies.stderr
    assert "kind: ValidatingAdmissionPolicy\n" in policies.stdout


def test_the_install_instructions_are_the_commands_this_file_checks(wheel: zipfile.ZipFile) -> None:
    """docs/install.md's commands, every one: a clone's `pipx install .` (the wheel built from the tree,
    installed in a virtual environment of its own, as above), or the wheel built by the command shown and
    installed by its file name; no placeholder to fill in."""
    text = (ROOT / "docs" / "install.md").read_text()
    section = text.split("### The `tls-injector` command on your machine\n", 1)[1].split("\n### ", 1)[0]
    shown = [line.split("  #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
             for line in block.splitlines() if line.strip()]
    assert shown == ["cd tls-injector", "pipx install .", "tls-injector --version", "tls-injector --help",
                     "python3 -m pip wheel --no-deps --wheel-dir dist .",
                     "pipx install dist/tls_injector-*-py3-none-any.whl",
                     "tls-injector completion bash > /dev/null", "tls-injector version -o yaml"]
    assert not re.search(r"<[a-z][^>]*>", section), "a placeholder the reader cannot run"
    assert fnmatch.fnmatch(Path(str(wheel.filename)).name, "tls_injector-*-py3-none-any.whl")
    assert "`python -m tls_injector` is the same command" in section


def test_the_wheel_installs_beside_another_projects_app_package(wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    """A top-level `app` is what many projects name their code. Installed into an environment that already
    has one, and run from a directory that has one of its own, both still work: the command and `python -m
    tls_injector` are ours, `import app` is theirs, before and after."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    bin_dir = env_dir / "bin"
    site = Path(subprocess.run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    (site / "app").mkdir()
    (site / "app" / "__init__.py").write_text("WHO = 'the other project (installed)'\n")
    (site / "app" / "__main__.py").write_text("print('the other project runs')\n")
    workdir = tmp_path / "their-project"
    (workdir / "app").mkdir(parents=True)
    (workdir / "app" / "__init__.py").write_text("WHO = 'the other project (working directory)'\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--no-deps",
                              "--no-index", "--disable-pip-version-check", "-q", str(wheel.filename)],
                             capture_output=True, text=True, check=False, timeout=120)
    assert install.returncode == 0, install.stdout + install.stderr
    assert (site / "app" / "__init__.py").read_text() == "WHO = 'the other project (installed)'\n", "ours clobbered it"

    def run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, cwd=cwd,
                              env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})

    version = f"tls-injector {metadata.version('tls-injector')}"
    for cwd in (tmp_path, workdir):
        ours = run(bin_dir / "python", "-m", "tls_injector", "--version", cwd=cwd)
        assert (ours.returncode, ours.stdout.strip()) == (0, version), ours.stderr
        command = run(bin_dir / "tls-injector", "--version", cwd=cwd)
        assert (command.returncode, command.stdout.strip()) == (0, version), command.stderr
    theirs = run(bin_dir / "python", "-m", "app", cwd=tmp_path)
    assert (theirs.returncode, theirs.stdout.strip()) == (0, "the other project runs"), theirs.stderr
    who = run(bin_dir / "python", "-c", "import app; print(app.WHO)", cwd=workdir)
    assert who.stdout.strip() == "the other project (working directory)", who.stderr
