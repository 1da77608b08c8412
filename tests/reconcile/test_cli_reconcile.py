"""`tls-injector reconcile --once` end to end against the emulator."""

from __future__ import annotations

import functools
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, namespace, small_cluster
from tests.test_cli_serve import free_port
from tls_injector.cli import main
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.kube import find_cluster
from tls_injector.reconcile.core.budget import NAMESPACE_TURN_SECONDS
from tls_injector.reconcile.loop.controller import STUCK_AFTER_SECONDS, Controller
from tls_injector.reconcile.loop.runner import run_reconciler, run_until_signalled


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
    assert err.startswith("tls-injector reconcile: cannot load the cluster configuration (kubeconfig ")
    assert "Traceback" not in err


def test_serve_runs_the_reconciler_in_the_background_only_when_a_cluster_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tls_injector.cli.serve_cluster import reconciler_in_background as _reconciler_in_background
    from tls_injector.web.health import Health
    from tls_injector.web.metrics import ServerMetrics

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    alone = _parser().parse_args(["serve"])
    assert _reconciler_in_background(alone, ServerMetrics(), Health()) == (
        [], "off (no cluster configured: no in-cluster service account, no kubeconfig)")
    refused = _parser().parse_args(["serve", "--server", "http://127.0.0.1:1", "--no-reconciler"])
    assert _reconciler_in_background(refused, ServerMetrics(), Health()) == ([], "off (--no-reconciler)")
    with_cluster = _parser().parse_args(["serve", "--server", "http://127.0.0.1:1", "--namespace", "x"])
    metrics, health = ServerMetrics(), Health()
    [task], said = _reconciler_in_background(with_cluster, metrics, health)
    assert said == "on (server http://127.0.0.1:1, namespace x)"
    assert isinstance(task, functools.partial)
    assert task.func is run_reconciler
    assert task.args[0].server == "http://127.0.0.1:1"
    reconcile_metrics = task.keywords["metrics"]
    assert (task.args[1].namespace, reconcile_metrics.registry) == ("x", metrics.registry)
    # The command builds the loop's settings whole, its turn bound among them (nothing below changes them).
    assert task.args[1].turn_seconds == NAMESPACE_TURN_SECONDS
    # /readyz follows the reconciler's last verdict on the served certificate; unknown holds nothing back.
    assert health.serving_trusted() is None
    reconcile_metrics.serving_verdict = False
    assert health.serving_trusted() is False


def test_reconcile_serves_metrics_and_health_on_plain_http_while_its_loop_runs(kubeapi: Emulator) -> None:
    """The standalone reconciler's probe port: /healthz 200 while the loop comes round, 503 once it stopped;
    /metrics carries the reconciler's own series (the leader gauge turns 1 once it holds the Lease)."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    args = _parser().parse_args(["reconcile", "--server", kubeapi.url, "--namespace", OWN_NS])
    cluster = find_cluster(server=kubeapi.url)
    assert cluster is not None
    stop = threading.Event()
    port = free_port()
    loop = threading.Thread(target=run_until_signalled, args=(cluster, settings_for(args, loop=True)),
                            kwargs={"probe_address": ("127.0.0.1", port), "stop": stop})
    loop.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while "tls_injector_leader 1.0" not in _get(base + "/metrics"):
            assert time.monotonic() < deadline, "never became leader"
            time.sleep(0.1)
        assert httpx.get(base + "/healthz").status_code == 200
        assert httpx.get(base + "/readyz").status_code == 200
        assert httpx.get(base + "/nothing-here").status_code == 404
        # The status names every opted-in namespace and Secret: served only with --status.
        assert httpx.get(base + "/api/v1/status").status_code == 404
        assert httpx.get(base + "/").status_code == 404
    finally:
        stop.set()
        loop.join(timeout=10)
    assert not loop.is_alive()
    with pytest.raises(httpx.ConnectError):  # the port is closed with the loop
        httpx.get(base + "/healthz")


def _get(url: str) -> str:
    try:
        return httpx.get(url).text
    except httpx.ConnectError:  # not listening yet
        return ""


def test_the_health_check_fails_when_the_loop_has_not_come_round_for_90_seconds() -> None:
    controller = Controller(api=None, reconciler=None)  # type: ignore[arg-type]
    assert controller.alive() is False  # not started
    controller.heartbeat = 1000.0
    assert controller.alive(now=1000.0 + STUCK_AFTER_SECONDS - 1) is True
    assert controller.alive(now=1000.0 + STUCK_AFTER_SECONDS) is False


def test_reconcile_reports_a_metrics_port_it_cannot_bind_as_one_line_and_exit_two(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["reconcile", "--server", kubeapi.url, "--namespace", OWN_NS, "--log-level", "error",
                     "--metrics-host", "127.0.0.1", "--metrics-port", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tls-injector reconcile: cannot serve metrics on 127.0.0.1:{port}")
    assert len(err.splitlines()) == 1


def test_reconcile_once_answers_pod_certificate_requests_on_a_cluster_that_serves_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with running_emulator(seed=0, certificates=("v1",)) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        req = kubelet.request(emu, kubelet.pod(emu, "web", "demo"))
        argv = ["reconcile", "--once", "--server", emu.url, "--namespace", OWN_NS, "--log-level", "error"]
        assert main(argv) == 0
        assert kubelet.condition(emu, req)["type"] == "Issued"
        assert kubelet.bundle_anchors(emu)
        assert main([*argv, "--pod-certificates", "off"]) == 0
        denied = kubelet.request(emu, kubelet.pod(emu, "web", "demo"))
        assert main([*argv, "--pod-certificates", "off"]) == 0
        assert kubelet.status(emu, denied) == {}  # off: never answered, never written
    assert "converged" in capsys.readouterr().out
