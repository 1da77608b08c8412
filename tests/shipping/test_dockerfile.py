"""The Dockerfile: hadolint-clean, multi-stage, non-root, and it runs the entry point pyproject declares."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

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


def test_the_build_has_a_builder_and_a_final_stage_on_a_pinned_python_3_11_slim_base() -> None:
    text = DOCKERFILE.read_text()
    args = dict(a.split("=", 1) for w, a in instructions(text) if w == "ARG" and "=" in a)
    groups = stages(text)
    assert len(groups) >= 2
    for group in groups:
        image = group[0][1].split()[0]
        for name, value in args.items():
            image = image.replace("${" + name + "}", value)
        assert image.startswith("python:3.11-slim"), image
        assert ":" in image
        assert not image.endswith(":latest")


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
    assert copies
    assert all(c[0] == "--from=builder" for c in copies)


def test_the_builder_installs_a_wheel_built_from_pyproject_and_removes_pip_from_the_venv() -> None:
    builder = " ".join(a for w, a in stages(DOCKERFILE.read_text())[0] if w in ("COPY", "RUN"))
    assert "pyproject.toml" in builder
    assert "pip wheel" in builder
    assert "pip install /wheels/" in builder
    assert "pip uninstall --yes pip" in builder


def test_the_docker_context_excludes_everything_but_the_package_sources() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "app"}
