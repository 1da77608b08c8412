"""`kubectl apply --dry-run=client -k` of every overlay an operator applies, against the API emulator:
kubectl builds it, maps every kind through the server's discovery and would create each object.

Schema validation is off here (`--validate=false`: the emulator serves no OpenAPI document); the
schema is checked strictly in test_schema.py with kubernetes-validate.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.kubeapi import Emulator
from tests.shipping.support import RENDERINGS, ROOT, kubectl, render

APPLIED = (*RENDERINGS, "manifests/overlays/example/bootstrap", "certs-bootstrap", "examples/sidecar-tls/crd")


@pytest.mark.parametrize("directory", APPLIED)
def test_kubectl_apply_dry_run_client_creates_every_object_of_the_overlay(directory: str, kubeapi: Emulator,
                                                                         tmp_path: Path) -> None:
    config = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
    result = subprocess.run([kubectl(), "--kubeconfig", str(config), "apply", "--dry-run=client", "--validate=false",
                             "-k", str(ROOT / directory)], capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    created = {line.split()[0].split("/", 1)[1] for line in result.stdout.splitlines()
               if line.endswith(" created (dry run)")}
    assert created == {o["metadata"]["name"] for o in render(ROOT / directory)}
    assert kubeapi.writes() == []
