"""What every `tls-injector` command shares: --version, defaults in --help, one exit-code convention, the
command's own usage on a usage error, and what `serve` says at start-up."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from tests.support.cli import exit_of
from tls_injector.cli.parser import build_parser as _parser

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["serve", "reconcile", "bootstrap", "inject", "check", "export-policy"]



def test_version_prints_the_installed_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exit_of(["--version"], capsys)
    assert code == 0
    assert out.strip() == f"tls-injector {metadata.version('tls-injector')}"


def _flags_with_defaults(command: str) -> dict[str, object]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return {a.option_strings[0]: a.default for a in parser._actions  # help lists a flag by its first spelling
            if a.option_strings and a.default not in (None, False) and a.default != "==SUPPRESS=="}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_shows_every_default(command: str, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps to the terminal, also inside hyphenated words
    code, out, _ = exit_of([command, "--help"], capsys)
    assert code == 0
    # One entry per flag ("--port PORT  HTTPS port ... (default: 8443)"), argparse's wrapping undone.
    entries = [" ".join(e.split()) for e in re.split(r"\n  (?=-)", out.split("options:", 1)[1])]
    defaults = _flags_with_defaults(command)
    assert defaults or command in ("inject", "check")  # these two have only required flags and switches
    for flag, default in defaults.items():
        entry = next(e for e in entries if e.startswith(flag + " ") or e.startswith(flag + ","))
        assert f"(default: {default})" in entry, f"{command} {flag}: default {default!r} not shown: {entry}"
    assert "(default: None)" not in out


def test_the_help_of_serve_shows_the_port_and_the_drain_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = exit_of(["serve", "--help"], capsys)
    text = " ".join(out.split())
    assert "HTTPS port for the webhook (default: 8443)" in text
    assert "(default: 20)" in text


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["serve", "--tls-cert-file", "/x.crt"], "usage: tls-injector serve"),
        (["serve", "--port", "not-a-number"], "usage: tls-injector serve"),
        (["check", "--old", "-", "--new", "-"], "usage: tls-injector check"),
        (["check"], "usage: tls-injector check"),
        (["inject"], "usage: tls-injector inject"),
        (["export-policy", "--format", "xml"], "usage: tls-injector export-policy"),
        (["reconcile", "--metrics-port", "x"], "usage: tls-injector reconcile"),
        (["bootstrap", "--webhook-configurations", ""], "usage: tls-injector bootstrap"),
        (["no-such-command"], "usage: tls-injector [-h]"),
    ],
)
def test_a_usage_error_exits_2_with_the_commands_own_usage(argv: list[str], usage: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of(argv, capsys)
    assert (code, out) == (2, "")
    assert usage in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["inject", "-f", "{missing}"],
        ["check", "--old", "{missing}", "--new", "{missing}"],
        ["export-policy", "--rules", "{missing}"],
        ["check", "--old", "{bad}", "--new", "{bad}"],
        ["inject", "-f", "{bad}"],
    ],
)
def test_an_input_error_exits_2_with_one_line_naming_the_input(argv: list[str], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [unclosed")
    paths = {"missing": str(tmp_path / "missing.yaml"), "bad": str(tmp_path / "bad.yaml")}
    code, out, err = exit_of([a.format(**paths) for a in argv], capsys)
    assert (code, out) == (2, "")
    assert re.match(r"tls-injector [a-z-]+: ", err), err
    assert str(tmp_path) in err or "missing.yaml" in err or "not valid YAML" in err


def test_export_policy_with_nothing_to_export_says_so_on_stderr_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = exit_of(["export-policy", "--format", "crd"], capsys)
    assert (code, out) == (0, "")
    assert err.startswith("tls-injector export-policy: nothing to export: no rule matches a custom resource")


def test_export_policy_scopes_the_bindings_to_outside_the_given_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exit_of(["export-policy", "--namespace", "platform-tls"], capsys)
    assert code == 0
    bindings = [d for d in yaml.safe_load_all(out) if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert bindings
    for binding in bindings:
        # The first expression leaves out those namespaces; a second may scope by the opt-in label.
        expression = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
        assert expression["key"] == "kubernetes.io/metadata.name"
        assert expression["values"] == ["kube-system", "kube-node-lease", "kube-public", "platform-tls"]


def test_the_exit_codes_are_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in section
    for command in COMMANDS:
        assert f"`{command}`" in section, command


def test_the_entry_point_is_the_same_as_python_m_tls_injector() -> None:
    result = subprocess.run([sys.executable, "-m", "tls_injector", "--version"], capture_output=True, text=True,
                            cwd=ROOT, check=False, timeout=30)
    assert (result.returncode, result.stdout.strip()) == (0, f"tls-injector {metadata.version('tls-injector')}")
