"""The emulator as its own process: kubeconfig, the official client's config loader, control endpoints."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import kubernetes.config
import pytest


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        result: dict[str, Any] = json.load(answer)
        return result


def test_a_separate_emulator_process_serves_a_kubeconfig_client_and_its_controls(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "tests.kubeapi", "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        config = k8s.Configuration()
        kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
        assert config.host == url
        added = post(f"{url}/_emulator/add", {"items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seeded", "namespace": "default"}}]})
        assert added == {"added": 1}
        with k8s.ApiClient(config) as client:
            core = k8s.CoreV1Api(client)
            assert core.read_namespaced_config_map("seeded", "default").metadata.name == "seeded"
            post(f"{url}/_emulator/fail_next", {"verb": "list", "resource": "configmaps", "code": 503})
            with pytest.raises(k8s.exceptions.ApiException) as exc:
                core.list_namespaced_config_map("default")
            assert exc.value.status == 503
        with urllib.request.urlopen(f"{url}/_emulator/calls", timeout=5) as answer:
            calls = json.load(answer)
        assert calls == {"total": 2, "writes": 0, "by": {"get configmaps": 1, "list configmaps": 1}}
    finally:
        proc.terminate()
        code = proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0
