"""Errors keep the README's promise: one line on stderr starting with `tls-injector <command>:`, nothing
before it, exit 2; an unknown flag gets the command's own usage; a command that calls the API gives up
after --timeout instead of waiting in silence."""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, small_cluster
from tests.support.cli import exit_of
from tests.test_cli_serve import free_port
from tls_injector.cli.flags import duration
from tls_injector.cli.parser import build_parser
from tls_injector.settings import API_TIMEOUT_SECONDS

# The least each command needs to get past argparse's required arguments.
COMMANDS = {"serve": [], "reconcile": [], "bootstrap": [], "doctor": [], "export-policy": [],
            "inject": ["-f", "x.yaml"], "check": ["--old", "a.yaml", "--new", "b.yaml"]}
API_COMMANDS = ["serve", "reconcile", "bootstrap", "doctor"]
# Well under API_TIMEOUT_SECONDS: a command that took longer did not use --timeout. The slack is for a
# loaded machine (the process itself takes a second or two to start there).
GAVE_UP_WITHIN = 12.0



@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_prints_the_commands_own_usage_and_error(command: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of([command, *COMMANDS[command], "--no-such-flag"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"usage: tls-injector {command} "), err
    assert err.splitlines()[-1] == f"tls-injector {command}: error: unrecognized arguments: --no-such-flag"
    assert "tls-injector: error:" not in err


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")


@pytest.mark.usefixtures("no_cluster")
@pytest.mark.parametrize("argv", [["serve", "--port", "0", "--host", "127.0.0.1"], ["reconcile"],
                                  ["reconcile", "--once"], ["bootstrap"], ["doctor"]])
def test_a_missing_kubeconfig_is_one_line_that_says_no_such_file(argv: list[str], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "kubeconfig"
    code, _, err = exit_of([*argv, "--kubeconfig", str(missing), "--self-signed-dir", str(tmp_path / "ss")]
                         if argv[0] == "serve" else [*argv, "--kubeconfig", str(missing)], capsys)
    # Before: a JSON log line first (serve, bootstrap, reconcile), then "Invalid kube-config file. No
    # configuration found."
    assert code == 2
    assert err == (f"tls-injector {argv[0]}: cannot load the cluster configuration (kubeconfig {missing}): "
                   f"no such file\n")


def test_serve_on_a_port_that_is_taken_prints_one_line_and_no_log_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = exit_of(["serve", "--host", "127.0.0.1", "--port", str(port), "--no-reconciler",
                              "--self-signed-dir", str(tmp_path / "ss")], capsys)
    assert code == 2
    assert err.startswith(f"tls-injector serve: cannot listen on 127.0.0.1:{port}: ")
    assert "already in use" in err
    assert len(err.splitlines()) == 1  # before: the log lines of the start came first


def test_reconcile_on_a_metrics_port_that_is_taken_prints_no_log_before_its_line(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = exit_of(["reconcile", "--server", kubeapi.url, "--namespace", OWN_NS,  # --log-level info
                              "--metrics-host", "127.0.0.1", "--metrics-port", str(port)], capsys)
    assert code == 2
    assert err.startswith(f"tls-injector reconcile: cannot serve metrics on 127.0.0.1:{port}")
    assert len(err.splitlines()) == 1


def test_the_lines_held_during_a_start_are_written_once_it_has_started(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    code, _, err = exit_of(["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS], capsys)
    assert code == 0
    logged = [json.loads(line) for line in err.splitlines()]
    assert logged[0]["msg"] == "cluster domain"


@pytest.mark.parametrize("value", ["Not_Valid!", "UPPER", "a_b", "trail-", "a" * 64, "", "a.b"])
def test_export_policy_refuses_a_namespace_the_api_server_would_refuse(value: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of(["export-policy", "--namespace", value], capsys)
    assert (code, out) == (2, "")
    assert "usage: tls-injector export-policy" in err
    assert err.splitlines()[-1].startswith("tls-injector export-policy: error: argument --namespace: not a valid "
                                           "namespace name")


@pytest.mark.parametrize("value", ["platform-tls", "a" * 63, "0"])
def test_export_policy_takes_a_valid_namespace(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exit_of(["export-policy", "--namespace", value], capsys)
    assert code == 0
    assert value in out


@pytest.mark.parametrize("command", API_COMMANDS)
def test_every_command_that_calls_the_api_takes_a_timeout_of_30_seconds_by_default(command: str) -> None:
    args = build_parser().parse_args([command])
    assert args.timeout == API_TIMEOUT_SECONDS == 30.0
    assert build_parser().parse_args([command, "--timeout", "5s"]).timeout == 5.0
    assert build_parser().parse_args([command, "--timeout", "1m30s"]).timeout == 90.0
    assert build_parser().parse_args([command, "--timeout", "500ms"]).timeout == 0.5


@pytest.mark.parametrize(("value", "seconds"), [("30", 30.0), ("30s", 30.0), ("1.5s", 1.5), ("2m", 120.0),
                                                ("1h", 3600.0), ("24h", 86400.0), ("1m30s", 90.0),
                                                ("500ms", 0.5), ("1h0m30s", 3630.0), ("1.5h", 5400.0),
                                                ("250000us", 0.25), ("1000000000ns", 1.0), ("90µs", 0.00009)])
def test_a_timeout_is_written_as_kubectl_writes_it(value: str, seconds: float) -> None:
    assert duration(value) == seconds


@pytest.mark.parametrize("value", ["0", "0s", "-1", "1d", "", "s", "25h", "1e9", "9" * 400, "nan", "24h1s", "-1s",
                                   "1m-1s", "1w", "1y", "1h 30m", "ms", "9" * 60 + "h", "1" + "0s" * 40, "0.0001ms"])
def test_a_timeout_that_is_zero_negative_or_unreadable_is_refused(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a duration above zero"):
        duration(value)


@pytest.fixture
def silent_api() -> Iterator[str]:
    """A TCP server that accepts every connection and never answers: an API server that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        listener.close()
    assert held, "nothing connected: the test did not reach the API"


@pytest.mark.parametrize("command", [["reconcile", "--once"], ["bootstrap"], ["doctor"]])
def test_a_one_shot_command_gives_up_on_a_silent_api_after_the_timeout_in_one_line(
    command: list[str], silent_api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor too: with nothing read there is no report to give, so not exit 1 and a report of one check."""
    started = time.monotonic()
    code, out, err = exit_of([*command, "--server", silent_api, "--namespace", OWN_NS, "--timeout", "1"], capsys)
    took = time.monotonic() - started
    assert (code, out) == (2, "")
    assert err.startswith(f"tls-injector {command[0]}: cannot reach the API server (server {silent_api}; "
                          f"--timeout 1s): GET /version: "), err
    assert "timed out" in err
    assert len(err.splitlines()) == 1
    assert 1.0 <= took < GAVE_UP_WITHIN


@pytest.mark.parametrize("command", [["reconcile", "--once"], ["bootstrap"], ["doctor"]])
def test_a_refused_connection_is_said_at_once(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    code, out, err = exit_of([*command, "--server", server, "--namespace", OWN_NS], capsys)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1
    assert err.startswith(f"tls-injector {command[0]}: cannot reach the API server (server {server}; --timeout 30s)")
    assert "Connection refused" in err
