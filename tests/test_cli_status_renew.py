"""`status` and `renew` as a kubectl user runs them: no empty or malformed workload, an exit status that
catches a certificate about to end, both serials of a renewal, the flag that bounded a wait on a server
that never answers, and a kubeconfig that skips TLS verification said in one line."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import yaml

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler, small_cluster
from tests.reconcile.test_leader import _wait_for, running_loop
from tests.support.certs import ServingFiles, write_serving_pair
from tests.support.cli import exit_of
from tests.support.partition import partition
from tls_injector.pki import load_certificates

ROOT = Path(__file__).resolve().parents[1]
FORCE = "tls-injector.io/force-renew"
TLS_CHANGE = "tls-injector.io/tls-change"


def common(emu: Emulator | str) -> list[str]:
    url = emu if isinstance(emu, str) else emu.url
    return ["--server", url, "--namespace", OWN_NS, "--cluster-domain", "cluster.local"]


def serial(emu: Emulator, namespace: str, secret: str) -> str:
    return format(load_certificates(data(emu.get("secrets", secret, namespace))["tls.crt"])[0].serial_number, "x")


# ---- the workload argument ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "ns0", "ns0/", "/app0", "ns0//app0", "ns0/a/b/c", "Ns0/app0", "ns 0/app0",
                                   "ns0/" + "x" * 600, "a" * 64 + "/app0"])
@pytest.mark.parametrize("command", ["status", "renew"])
def test_an_empty_or_malformed_workload_is_a_usage_error_before_any_call(
    command: str, value: str, kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status ''` named no workload: it is not "every workload" (it printed the whole cluster, exit 0)."""
    code, out, err = exit_of([command, value, *common(kubeapi)], capsys)
    assert (code, out) == (2, "")
    assert f"tls-injector {command}: error: argument NAMESPACE/WORKLOAD" in err
    assert kubeapi.calls() == 0


def test_a_kind_and_a_name_are_still_taken(kubeapi: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    code, out, _ = exit_of(["status", "ns0/deployment/app0", *common(kubeapi)], capsys)
    assert code == 0
    assert "Workload: ns0/Deployment/app0" in out


# ---- the exit status of one workload ---------------------------------------------------------------


def issued_days_ago(emu: Emulator, days: int) -> None:
    """ns0/app0's certificate (90 days, renewed 35 days before its end) issued `days` ago."""
    small_cluster(emu, namespaces=1, per_namespace=1)
    reconciler(emu, Clock(datetime.now(UTC) - timedelta(days=days))).run_pass()


@pytest.mark.parametrize(("days", "code", "said"), [
    (0, 0, None),
    (54, 0, None),  # renewal due in a day: nothing yet
    (56, 1, "is overdue for renewal"),  # past its renewal time (35 days before its end), 34 days left
    (84, 1, ") expires 20"),  # within the 7 days the attention list marks: "expires <date> (in 5 d)"
    (87, 1, ") expires 20"),
])
def test_one_workload_exits_1_when_its_certificate_is_expiring_or_overdue_as_the_list_marks_it(
    days: int, code: int, said: str | None, kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    issued_days_ago(kubeapi, days)
    status, out, _ = exit_of(["status", "ns0/app0", *common(kubeapi)], capsys)
    assert status == code, out
    assert "Ready: True (Issued)" in out  # valid and in place: Ready says so; the exit status says more
    attention = [line for line in out.splitlines() if line.startswith("Attention: ")]
    listed, listed_out, _ = exit_of(["status", *common(kubeapi)], capsys)
    if said is None:
        assert attention == []
        assert listed == 0
        return
    assert len(attention) == 1
    assert said in attention[0]
    assert listed == 1
    assert attention[0].removeprefix("Attention: ") in listed_out  # the same words as the list's
    _, as_json, _ = exit_of(["status", "ns0/app0", "-o", "json", *common(kubeapi)], capsys)
    assert [said in text for text in orjson.loads(as_json)["attention"]] == [True]


def test_status_as_yaml_is_its_json(kubeapi: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    issued_days_ago(kubeapi, 87)
    for argv in (["status", "ns0/app0"], ["status"]):
        json_code, as_json, _ = exit_of([*argv, "-o", "json", *common(kubeapi)], capsys)
        yaml_code, as_yaml, _ = exit_of([*argv, "-o", "yaml", *common(kubeapi)], capsys)
        assert json_code == yaml_code == 1
        assert yaml.safe_load(as_yaml) == orjson.loads(as_json)


def test_status_shows_the_tls_exception_its_own_pod_template_names(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sanctioned exception (docs/rules.md, "Exceptions") is seen in `status`: a line and a field, for
    the workload whose pod template names it, not for its namesake elsewhere nor its neighbour."""
    namespace(kubeapi, OWN_NS)
    for ns in ("ns0", "ns1"):
        namespace(kubeapi, ns)
    deployment(kubeapi, "app0", "ns0", annotations={TLS_CHANGE: "(default)->app0-v2-tls",
                                                    "tls-injector.io/secret-name": "app0-v2-tls"})
    deployment(kubeapi, "app1", "ns0")
    deployment(kubeapi, "app1", "ns1", annotations={TLS_CHANGE: "app1-tls->(off)"})  # TLS still on: named, not made
    reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    code, out, _ = exit_of(["status", "ns0/app0", *common(kubeapi)], capsys)
    assert code == 0, out
    assert [line for line in out.splitlines() if line.startswith("TLS exception")] == [
        f"TLS exception: (default)->app0-v2-tls (Deployment/app0, {TLS_CHANGE})"]
    _, as_json, _ = exit_of(["status", "ns0/app0", "-o", "json", *common(kubeapi)], capsys)
    assert orjson.loads(as_json)["tls_exceptions"] == [{"workload": "Deployment/app0",
                                                        "change": "(default)->app0-v2-tls"}]
    _, as_yaml, _ = exit_of(["status", "ns0/app0", "-o", "yaml", *common(kubeapi)], capsys)
    assert yaml.safe_load(as_yaml) == orjson.loads(as_json)
    code, out, _ = exit_of(["status", "ns0/app1", *common(kubeapi)], capsys)
    assert code == 0, out
    assert "TLS exception" not in out
    _, as_json, _ = exit_of(["status", "ns0/app1", "-o", "json", *common(kubeapi)], capsys)
    assert orjson.loads(as_json)["tls_exceptions"] == []
    _, out, _ = exit_of(["status", "ns1/app1", *common(kubeapi)], capsys)
    assert f"TLS exception: app1-tls->(off) (Deployment/app1, {TLS_CHANGE})" in out.splitlines()


# ---- renew -------------------------------------------------------------------------------------------


def test_renew_prints_the_serial_before_and_after(kubeapi: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    with running_loop(kubeapi, watch_timeout_seconds=30):
        _wait_for(lambda: kubeapi.get("secrets", "app0-tls", "ns0") is not None)
        before = serial(kubeapi, "ns0", "app0-tls")
        code, out, _ = exit_of(["renew", "ns0/app0", "--timeout", "30s", *common(kubeapi)], capsys)
    after = serial(kubeapi, "ns0", "app0-tls")
    assert code == 0
    assert before != after
    assert f"Secret ns0/app0-tls (serial {before}); waiting up to 30s" in out
    assert f"renewed: serial {before} -> {after} (valid until " in out


def test_a_server_that_never_answers_is_named_by_the_flag_that_bounded_the_wait(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """--request-timeout bounds each call; renew's --timeout is its wait for the reconciler."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    with partition(kubeapi.url) as cut:
        cut.cut.set()
        started = time.monotonic()
        code, out, err = exit_of(["renew", "ns0/app0", "--request-timeout", "500ms", *common(cut.url)], capsys)
        took = time.monotonic() - started
    assert (code, out) == (2, "")
    assert "cannot reach the API server" in err
    assert "--request-timeout 500ms" in err
    assert "--timeout" not in err.replace("--request-timeout", "")
    assert took < 5


def test_a_server_that_stops_answering_during_the_wait_is_named_by_the_request_timeout(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    with partition(kubeapi.url) as cut:
        # Cut at the wait's first read, once the request (a PUT) has crossed: its answer reaches the command,
        # whose next read then gets none. (Cutting when the annotation shows in the store raced that answer.)
        asked = threading.Event()

        def at_the_first_read_after_the_request(data: bytes) -> bool:
            if data.startswith(b"PUT "):
                asked.set()
                return False
            return asked.is_set() and data.startswith(b"GET ")

        cut.cut_before = at_the_first_read_after_the_request
        code, out, err = exit_of(["renew", "ns0/app0", "--timeout", "1m", "--request-timeout", "1s",
                                  *common(cut.url)], capsys)
    assert asked.is_set()
    assert cut.cut.is_set()
    assert FORCE in kubeapi.get("secrets", "app0-tls", "ns0")["metadata"]["annotations"]
    assert code == 2
    assert "asked for a new certificate" in out
    assert err.startswith("tls-injector renew: cannot reach the API server (--request-timeout 1s): ")


# ---- a kubeconfig that skips TLS verification -------------------------------------------------------


class TlsFront:
    """HTTPS on loopback in front of the emulator (which speaks plain HTTP), with a certificate no client
    here trusts: what a kubeconfig with insecure-skip-tls-verify points at."""

    def __init__(self, upstream: str, files: ServingFiles) -> None:
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(files.cert_file, files.key_file)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), self.context.wrap_socket(client, server_side=True) as tls, \
                socket.create_connection(self.upstream) as upstream:
            threading.Thread(target=_copy, args=(upstream, tls), daemon=True).start()
            _copy(tls, upstream)

    def close(self) -> None:
        self.listener.close()


def _copy(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            target.sendall(chunk)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def tls_front(upstream: str, directory: Path) -> Iterator[TlsFront]:
    front = TlsFront(upstream, write_serving_pair(directory))
    try:
        yield front
    finally:
        front.close()


def insecure_kubeconfig(path: Path, url: str) -> Path:
    path.write_bytes(orjson.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}],
        "users": [{"name": "me", "user": {"token": "t"}}]}))
    return path


@pytest.mark.parametrize("argv", [["status", "ns0/app0"], ["status"], ["doctor", "-o", "json"]])
def test_insecure_skip_tls_verify_is_one_line_on_stderr_not_a_warning_per_request(
    argv: list[str], kubeapi: Emulator, tmp_path: Path
) -> None:
    """Run as a user runs it (its own process, Python's default warning filters), many requests each."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    with tls_front(kubeapi.url, tmp_path / "tls") as front:
        config = insecure_kubeconfig(tmp_path / "config", front.url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
        done = subprocess.run([sys.executable, "-m", "tls_injector", *argv, "--kubeconfig", str(config),
                               "--namespace", OWN_NS, "--cluster-domain", "cluster.local"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)
    assert kubeapi.calls() > 3  # the command did read the cluster, through the TLS front
    command = argv[0]
    assert done.stderr.splitlines() == [
        f"tls-injector {command}: warning: TLS verification is off for kubeconfig {config} (insecure-skip-tls-verify): "
        "the API server's certificate is not checked, so anyone on the path can read and answer these requests"]
    assert "InsecureRequestWarning" not in done.stdout + done.stderr
    assert done.stdout  # the report itself
