"""The habits a kubectl user brings to `tls-injector`: --context on every command that calls the API, long
flags only as spelled, a `version` command, shell completion, `-o yaml` beside every `-o json`, durations
as Go writes them (and shown so in --help), and one line, not a warning block per request, for a
kubeconfig that skips TLS verification."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import orjson
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, small_cluster
from tests.support.cli import exit_of
from tls_injector.cli import flags
from tls_injector.cli.completion import SHELLS, script
from tls_injector.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[1]
# The commands that call the Kubernetes API, and those that never do.
CLUSTER_COMMANDS = ("serve", "reconcile", "bootstrap", "doctor", "status", "renew")
OFFLINE_COMMANDS = ("inject", "check", "export-policy", "version", "completion")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    root = build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


# ---- flags only as spelled ---------------------------------------------------------------------------


def test_no_parser_takes_an_abbreviated_long_flag() -> None:
    assert build_parser().allow_abbrev is False
    assert {name: p.allow_abbrev for name, p in subparsers().items()} == dict.fromkeys(subparsers(), False)


@pytest.mark.parametrize(("argv", "abbreviated"), [
    (["renew", "ns/app", "--time", "5s"], "--time"),  # --timeout
    (["status", "ns/app", "--kube", "x"], "--kube"),  # --kubeconfig
    (["doctor", "--out", "json"], "--out"),  # --output
    (["reconcile", "--onc"], "--onc"),  # --once
    (["serve", "--no-rec"], "--no-rec"),  # --no-reconciler
    (["--vers"], "--vers"),  # --version
])
def test_an_abbreviated_long_flag_is_a_usage_error(argv: list[str], abbreviated: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of(argv, capsys)
    assert code == 2
    assert f"unrecognized arguments: {abbreviated}" in err
    assert out == ""


def test_check_does_not_take_ol_for_old(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\n")
    code, _, err = exit_of(["check", "--ol", str(manifest), "--new", str(manifest)], capsys)
    assert code == 2
    assert "--old" in err  # required, and --ol is not it


# ---- --context -----------------------------------------------------------------------------------


def test_every_command_that_calls_the_api_takes_context_and_no_other_does() -> None:
    parsers = subparsers()
    assert set(parsers) == set(CLUSTER_COMMANDS) | set(OFFLINE_COMMANDS)
    assert {name for name, p in parsers.items() if option(p, "--context")} == set(CLUSTER_COMMANDS)


def two_contexts(path: Path, *, shop: str, empty: str, current: str = "empty") -> Path:
    """A kubeconfig of two clusters, as kubectl's users have them: `shop` and `empty`."""
    clusters = [{"name": name, "cluster": {"server": url}} for name, url in (("shop", shop), ("empty", empty))]
    contexts = [{"name": name, "context": {"cluster": name, "user": "me"}} for name in ("shop", "empty")]
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "Config", "current-context": current,
                                   "clusters": clusters, "contexts": contexts, "users": [{"name": "me", "user": {}}]}))
    return path


def test_context_picks_the_kubeconfig_context_the_commands_talk_to(kubeapi: Emulator, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    with running_emulator() as other:
        config = two_contexts(tmp_path / "config", shop=kubeapi.url, empty=other.url)
        common = ["--kubeconfig", str(config), "--namespace", OWN_NS, "--cluster-domain", "cluster.local"]
        code, out, err = exit_of(["reconcile", "--once", "--context", "shop", "--webhook-configurations", "",
                                  "--log-level", "error", *common], capsys)
        assert code == 0, out + err
        assert kubeapi.get("secrets", "app0-tls", "ns0") is not None
        assert other.writes() == []
        code, out, err = exit_of(["status", "ns0/app0", "--context", "shop", *common], capsys)
        assert (code, err) == (0, ""), out + err
        assert "Secret: ns0/app0-tls (ours)" in out
        # The current context is the other cluster, which has no such workload.
        code, _, err = exit_of(["status", "ns0/app0", *common], capsys)
        assert code == 2
        assert "no opted-in workload ns0/app0" in err
        assert other.calls() > 0


def test_a_context_the_kubeconfig_lacks_is_one_line_and_exit_2(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = two_contexts(tmp_path / "config", shop="http://127.0.0.1:1", empty="http://127.0.0.1:1")
    code, out, err = exit_of(["doctor", "--kubeconfig", str(config), "--context", "staging"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"tls-injector doctor: cannot load the cluster configuration (kubeconfig {config}, "
                          "context staging): ")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["doctor", "status", "renew ns/app", "bootstrap", "reconcile", "serve"])
def test_context_and_server_together_are_a_usage_error(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = exit_of([*command.split(), "--context", "shop", "--server", "http://127.0.0.1:1"], capsys)
    assert code == 2
    assert "not allowed with argument" in err


@pytest.mark.parametrize("value", ["", "x" * 254, "shop\nprod", "tab\there"])
def test_a_context_name_that_is_empty_huge_or_holds_control_characters_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = exit_of(["status", "--context", value], capsys)
    assert code == 2
    assert "expected a kubeconfig context's name" in err


# ---- version and completion ------------------------------------------------------------------------


def test_version_says_what_version_says_and_as_json_and_yaml_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    installed = metadata.version("tls-injector")
    code, text, _ = exit_of(["version"], capsys)
    assert (code, text) == (0, f"tls-injector {installed}\n")
    assert exit_of(["--version"], capsys)[1] == text
    _, as_json, _ = exit_of(["version", "-o", "json"], capsys)
    _, as_yaml, _ = exit_of(["version", "-o", "yaml"], capsys)
    assert orjson.loads(as_json) == yaml.safe_load(as_yaml) == {"version": installed,
                                                                "python": ".".join(map(str, sys.version_info[:3]))}


def bash_completes(script_path: Path, line: str) -> list[str]:
    """What bash offers at the end of `line` with the script loaded, as pressing TAB there would."""
    words = line.split(" ")
    program = (f"source {script_path}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
               f"COMP_CWORD={len(words) - 1}\nCOMP_LINE={line!r}\nCOMP_POINT={len(line)}\n"
               "_shtab_tls_injector\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.split()


def test_the_bash_completion_script_completes_commands_flags_and_choices(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = exit_of(["completion", "bash"], capsys)
    assert code == 0
    path = tmp_path / "tls-injector.bash"
    path.write_text(text)
    assert bash_completes(path, "tls-injector sta") == ["status"]
    assert bash_completes(path, "tls-injector re") == ["reconcile", "renew"]
    assert "--context" in bash_completes(path, "tls-injector status --con")
    assert bash_completes(path, "tls-injector renew --request") == ["--request-timeout"]
    assert bash_completes(path, "tls-injector doctor -o ") == ["text", "json", "yaml"]
    assert bash_completes(path, "tls-injector completion ") == list(SHELLS)
    (tmp_path / "old.yaml").write_text("")
    assert bash_completes(path, f"tls-injector check --old {tmp_path}/ol") == [f"{tmp_path}/old.yaml"]


@pytest.mark.parametrize("shell", SHELLS)
def test_each_shells_script_names_every_command_and_the_context_flag(shell: str) -> None:
    text = script(shell)
    for command in (*CLUSTER_COMMANDS, *OFFLINE_COMMANDS):
        assert command in text, (shell, command)
    assert re.search(r"--context\b| context ", text)  # tcsh lists long flags without their dashes
    assert "worker-fd" not in text  # a flag hidden from --help is hidden from completion too


def test_every_runtime_dependency_declared_is_imported_by_app_and_every_import_declared() -> None:
    """pyproject's [project].dependencies are what app/ imports, no more (durationpy left when the one
    duration reader replaced it) and no less (shtab came with `completion`): the lock and the image follow."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    dists = metadata.packages_distributions()
    imported = set()
    for path in (ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "tls_injector":
                    imported |= {canonicalize_name(d) for d in dists.get(top, [top])}
    # uvicorn[standard]'s extras (uvloop, httptools are also imported by name) are declared through uvicorn.
    assert declared == imported, (sorted(declared - imported), sorted(imported - declared))


# ---- -o yaml -----------------------------------------------------------------------------------------


def test_every_output_flag_with_json_has_yaml() -> None:
    outputs = {name: option(p, "--output") for name, p in subparsers().items()}
    with_json = {name: list(a.choices or []) for name, a in outputs.items() if a and "json" in (a.choices or [])}
    assert set(with_json) == {"check", "doctor", "status", "version"}
    assert all(choices == ["text", "json", "yaml"] for choices in with_json.values()), with_json


def test_check_as_yaml_is_its_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    template = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n"
                "  selector: {matchLabels: {app: web}}\n  template:\n    metadata:\n"
                "      labels: {app: web%s}\n    spec: {containers: [{name: app, image: 'example/app:1'}]}\n")
    old.write_text(template % ", tls-injector.io/inject: 'true'")
    new.write_text(template % "")  # TLS turned off in place: rejected
    json_code, as_json, _ = exit_of(["check", "--old", str(old), "--new", str(new), "-o", "json"], capsys)
    yaml_code, as_yaml, _ = exit_of(["check", "--old", str(old), "--new", str(new), "-o", "yaml"], capsys)
    assert json_code == yaml_code == 1
    assert yaml.safe_load(as_yaml) == orjson.loads(as_json)
    assert orjson.loads(as_json)["allowed"] is False


def test_doctor_as_yaml_is_its_json_even_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["doctor", "--server", "http://127.0.0.1:1", "--timeout", "1s"]
    json_code, as_json, _ = exit_of([*argv, "-o", "json"], capsys)
    yaml_code, as_yaml, err = exit_of([*argv, "-o", "yaml"], capsys)
    assert json_code == yaml_code == 2
    assert yaml.safe_load(as_yaml) == orjson.loads(as_json)
    assert "cannot reach the API server" in err


# ---- durations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [("1.5h", 5400.0), ("30", 30.0), ("1m30s", 90.0), ("500ms", 0.5),
                                                ("24h", 86400.0), (".5s", 0.5), ("1h0.5s", 3600.5)])
def test_a_timeout_takes_go_durations(value: str, seconds: float) -> None:
    assert flags.duration(value) == seconds


def test_the_profile_flags_take_the_same_durations_as_the_timeouts(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["status", "--timeout", "1.5h", "--default-duration", "2159.5h",
                                      "--max-duration", "8759.5h"])
    assert args.timeout == 5400.0
    from tls_injector.cli.cluster import profile_bounds

    bounds = profile_bounds(args)
    assert bounds.default_duration.total_seconds() == 2159.5 * 3600
    assert bounds.max_duration.total_seconds() == 8759.5 * 3600


def duration_flags() -> list[tuple[str, argparse.Action]]:
    return [(name, a) for name, p in subparsers().items() for a in p._actions if a.metavar == "DURATION"]


def test_every_duration_flags_default_is_a_duration_its_own_type_reads() -> None:
    found = duration_flags()
    assert {"--timeout", "--request-timeout", "--idle-timeout", "--reload-interval", "--default-duration"} <= {
        a.option_strings[0] for _, a in found}
    for name, action in found:
        if action.default is None:
            continue
        assert isinstance(action.default, str), (name, action.option_strings)
        assert not re.fullmatch(r"[0-9.]+", action.default), (name, action.option_strings, action.default)
        assert action.type is not None
        action.type(action.default)  # type: ignore[operator]  # reads back


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_help_prints_durations_as_durations(command: str, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    _, out, _ = exit_of([command, "--help"], capsys)
    assert not re.search(r"\(default: [0-9]+\.[0-9]+\)", out), out
    assert "(default: 30s)" in out  # the per-request timeout


def test_renews_wait_and_request_timeout_defaults_read_as_durations(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    _, out, _ = exit_of(["renew", "--help"], capsys)
    text = " ".join(out.split())
    assert re.search(r"--timeout DURATION how long to wait .*\(default: 2m\)", text)
    assert re.search(r"--request-timeout DURATION how long one request .*\(default: 30s\)", text)
