"""`tls-injector reconcile --once` end to end against the emulator."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from app.cli import main
from app.reconcile.runner import run_reconciler
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, small_cluster


def test_reconcile_once_converges_then_writes_nothing_and_exits_zero(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    argv = ["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS, "--log-level", "error"]
    assert main(argv) == 0
    assert all(kubeapi.get("secrets", name, ns) for ns, name in secrets)
    assert kubeapi.get("secrets", "tls-injector-webhook-tls", OWN_NS) is not None  # self-care is on by default
    kubeapi.reset_log()
    assert main(argv) == 0
    assert kubeapi.writes() == []
    assert "converged: 0 writes" in capsys.readouterr().out.splitlines()[-1]


def test_reconcile_once_exits_one_when_a_secret_is_in_the_way(kubeapi: Emulator) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app0-tls", "namespace": "ns0"}})
    assert main(["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS, "--log-level", "error"]) == 1


def test_reconcile_exits_two_without_any_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    assert main(["reconcile", "--once", "--log-level", "error"]) == 2


def test_a_kubeconfig_that_cannot_be_loaded_is_a_message_and_exit_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    assert main(["reconcile", "--once", "--kubeconfig", str(broken), "--log-level", "error"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tls-injector: cannot load the cluster configuration (kubeconfig ")
    assert "Traceback" not in err


def test_serve_runs_the_reconciler_in_the_background_only_when_a_cluster_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.cli import _parser, _reconciler_in_background
    from app.web.metrics import ServerMetrics

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    alone = _parser().parse_args(["serve"])
    assert _reconciler_in_background(alone, ServerMetrics()) == []
    with_cluster = _parser().parse_args(["serve", "--server", "http://127.0.0.1:1", "--namespace", "x"])
    metrics = ServerMetrics()
    [task] = _reconciler_in_background(with_cluster, metrics)
    assert isinstance(task, functools.partial)
    assert task.func is run_reconciler
    assert task.args[0].server == "http://127.0.0.1:1"
    assert (task.args[1].namespace, task.keywords["registry"]) == ("x", metrics.registry)
