"""The Dockerfile: hadolint-clean, multi-stage, non-root, pinned to the byte (base digest, hash-locked
dependencies), and it runs the entry point pyproject declares."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.shipping.support import ROOT, installed, of_kind

DOCKERFILE = ROOT / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    joined = text.replace("\\\n", " ")
    pairs = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def stages(text: str) -> list[list[tuple[str, str]]]:
    """Instructions grouped by FROM; ARGs before the first FROM form stage 0's preamble."""
    groups: list[list[tuple[str, str]]] = [[]]
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            groups.append([])
        groups[-1].append(instruction)
    return groups[1:]


def final_stage() -> list[tuple[str, str]]:
    return stages(DOCKERFILE.read_text())[-1]


def _hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    assert beside.exists(), "hadolint is missing: install the dev dependencies (pip install -e '.[dev]')"
    return str(beside)


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                            check=False, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_really_consulted_and_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nUSER root\n")
    result = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, check=False,
                            timeout=30)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # "latest" tag


def test_the_build_has_a_builder_on_a_python_3_11_slim_base_pinned_by_digest_and_a_final_stage_on_scratch() -> None:
    text = DOCKERFILE.read_text()
    args = dict(a.split("=", 1) for w, a in instructions(text) if w == "ARG" and "=" in a)
    groups = stages(text)
    assert len(groups) >= 2
    assert groups[-1][0] == ("FROM", "scratch"), "the final stage is the assembled tree alone"
    for group in groups[:-1]:
        image = group[0][1].split()[0]
        for name, value in args.items():
            image = image.replace("${" + name + "}", value)
        # A version tag for people, the digest for the builder: a tag can be re-pointed, a digest cannot.
        assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+@sha256:[0-9a-f]{64}", image), image


def test_the_final_stage_runs_as_the_numeric_non_root_user_the_manifests_expect() -> None:
    users = [a for w, a in final_stage() if w == "USER"]
    assert users, "no USER in the final stage: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) > 0
    assert (not gid or gid.isdigit())
    for controller in [*of_kind(installed(), "Deployment"), *of_kind(installed(), "Job")]:
        pod = controller["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == int(uid)


def test_the_entrypoint_is_the_console_script_declared_in_pyproject_and_the_default_command_is_serve() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    final = dict(final_stage())
    assert json.loads(final["ENTRYPOINT"]) == ["tls-injector"]
    assert "tls-injector" in scripts
    assert json.loads(final["CMD"]) == ["serve"]


def test_the_final_stage_copies_only_the_virtualenv_and_has_no_build_step_or_healthcheck() -> None:
    final = final_stage()
    words = [w for w, _ in final]
    assert "RUN" not in words, "the final stage must not install or compile anything"
    assert "HEALTHCHECK" not in words, "Kubernetes probes /healthz and /readyz instead"
    copies = [shlex.split(a) for w, a in final if w == "COPY"]
    assert copies == [["--from=builder", "/rootfs", "/"]], "only the tree tools/rootfs.sh assembled"


def test_the_builder_assembles_the_final_tree_from_the_interpreter_and_the_virtualenv_with_the_tested_script() -> None:
    builder = stages(DOCKERFILE.read_text())[0]
    assert ("COPY", "tools/rootfs.sh /usr/local/bin/rootfs.sh") in builder
    runs = [a for w, a in builder if w == "RUN"]
    assert runs[-1] == '/usr/local/bin/rootfs.sh "${PYTHON_PREFIX}" /opt/tls-injector /rootfs', "assembled last"
    # The interpreter's prefix is a build argument whose default is the python image's own: a user's build
    # passes none. tools/image.py passes /usr for the Debian base it builds on (tests/image).
    assert ("ARG", "PYTHON_PREFIX=/usr/local") in builder
    env = dict(pair.split("=", 1) for w, a in final_stage() if w == "ENV" for pair in shlex.split(a))
    assert env["PATH"] == "/opt/tls-injector/bin", "no directory of tools on the PATH"


def test_the_builder_installs_only_hash_locked_dependencies_then_the_wheel_without_resolving_again() -> None:
    runs = [a for w, a in stages(DOCKERFILE.read_text())[0] if w == "RUN"]
    commands = [c.strip() for run in runs for c in run.split("&&")]
    installs = [c for c in commands if " install " in f" {c} "]
    locked = [c for c in installs if " -r " in c]
    assert {shlex.split(c)[-1] for c in locked} == {"requirements.lock", "requirements-build.lock"}
    assert all("--require-hashes" in c for c in locked)
    # Everything else installs only the wheel built here, with no dependency resolution (no unpinned fetch).
    assert [c for c in installs if c not in locked] == ["/opt/tls-injector/bin/pip install --no-deps /wheels/*.whl"]
    wheel = next(c for c in commands if "pip wheel" in c)
    assert "--no-build-isolation" in wheel, "an isolated build would fetch an unpinned build backend"
    assert "--no-deps" in wheel
    # The venv's own pip and setuptools (a build backend) go: the built image is checked for both (tests/image).
    assert "/opt/tls-injector/bin/pip uninstall --yes pip setuptools" in commands


def test_the_docker_context_excludes_everything_but_the_package_sources() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "app", "requirements.lock", "requirements-build.lock",
                       "tools/rootfs.sh"}


def _locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a `pip --require-hashes` file (continuation lines joined)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
    for entry in text.replace("\\\n", " ").splitlines():
        if not entry.strip():
            continue
        requirement, *options = entry.split()
        name, _, version = requirement.partition("==")
        entries[canonicalize_name(name)] = (version, [o.removeprefix("--hash=sha256:") for o in options])
    return entries


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-build.lock"])
def test_every_locked_requirement_is_one_exact_version_with_sha256_hashes(lock: str) -> None:
    entries = _locked(ROOT / lock)
    assert entries
    for name, (version, hashes) in entries.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), f"{name}: not pinned to one version"
        assert hashes, f"{name}: no hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def _covers(lock: str, requirements: list[str]) -> None:
    entries = _locked(ROOT / lock)
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{requirement.name} is missing from {lock}: regenerate it (see its header)"
        assert requirement.specifier.contains(entries[name][0], prereleases=True), (
            f"{lock} pins {name}=={entries[name][0]}, outside pyproject's {requirement.specifier}")


def test_the_runtime_lock_covers_every_dependency_of_pyproject_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    _covers("requirements.lock", project["dependencies"])
    # The extras' own dependencies too: uvicorn[standard] brings uvloop, httptools, websockets, ...
    extras = [r for r in project["dependencies"] if Requirement(r).extras]
    assert extras
    installed = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    for text in extras:
        requirement = Requirement(text)
        for dependency in metadata.requires(requirement.name) or []:
            wanted = Requirement(dependency)
            markers = [{"extra": extra, "sys_platform": "linux", "platform_system": "Linux",
                        "platform_python_implementation": "CPython", "implementation_name": "cpython",
                        "python_version": "3.11", "python_full_version": "3.11.15", "platform_machine": "x86_64"}
                       for extra in requirement.extras]
            if wanted.marker is None or any(wanted.marker.evaluate(m) for m in markers):
                installed.add(canonicalize_name(wanted.name))
    assert installed <= set(_locked(ROOT / "requirements.lock"))


def test_the_build_lock_covers_the_build_backend_pyproject_declares() -> None:
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    _covers("requirements-build.lock", build)


def test_the_runtime_lock_is_what_the_tests_run_with() -> None:
    """The versions the suite just ran against are the image's: a newer release in the test environment
    than in the lock means the lock is stale (regenerate it, see its header)."""
    for name, (version, _) in _locked(ROOT / "requirements.lock").items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # a platform-specific dependency this environment does not need
        assert installed == version, f"tests run {name} {installed}, the image gets {version}"
