"""Hostile or wrong input to every command that reads files: one line naming the input and exit 2, never a
traceback. Deep nesting matters because PyYAML composes nodes recursively (a RecursionError escaped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tls_injector.cli import main

# Past Python's default recursion limit (1,000: PyYAML needs several frames per level), yet quick to fail.
DEPTH = 1_500


def _exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    """main(argv): (status, stdout, stderr lines that are not JSON log records)."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if not line.startswith("{")]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "deep.yaml").write_text("[" * DEPTH + "]" * DEPTH)
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    return {"deep": str(tmp_path / "deep.yaml"), "garbage": str(tmp_path / "garbage.bin"),
            "missing": str(tmp_path / "missing.yaml")}


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--old", "{deep}", "--new", "{deep}"],
        ["check", "--old", "{deep}", "--new", "{deep}", "--rules", "{deep}"],
        ["export-policy", "--rules", "{deep}"],
        ["serve", "--rules", "{deep}", "--no-reconciler", "--pod-certificates", "off"],
        ["doctor", "--kubeconfig", "{deep}"],
        ["reconcile", "--once", "--kubeconfig", "{deep}"],
        ["bootstrap", "--kubeconfig", "{deep}"],
        ["bootstrap", "--kubeconfig", "{missing}"],
        ["bootstrap", "--kubeconfig", "{garbage}"],
    ],
)
def test_an_unusable_input_file_is_one_line_and_exit_2(argv: list[str], inputs: dict[str, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _exit([a.format(**inputs) for a in argv], capsys)
    assert (code, out) == (2, ""), err
    assert len(err) == 1, err
    assert err[0].startswith("tls-injector"), err
    assert any(path in err[0] for path in inputs.values()) or "nested too deeply" in err[0], err


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["serve", "--rules", "{missing}", "--no-reconciler", "--pod-certificates", "off"], "serve"),
        (["reconcile", "--once", "--kubeconfig", "{missing}"], "reconcile"),
        (["bootstrap", "--kubeconfig", "{missing}"], "bootstrap"),
        (["doctor", "--kubeconfig", "{missing}"], "doctor"),
        (["check", "--old", "{missing}", "--new", "{missing}"], "check"),
        (["export-policy", "--rules", "{missing}"], "export-policy"),
        (["inject", "-f", "{missing}"], "inject"),
    ],
)
def test_every_error_line_names_its_command(argv: list[str], command: str, inputs: dict[str, str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _exit([a.format(**inputs) for a in argv], capsys)
    assert code == 2
    assert err[0].startswith(f"tls-injector {command}: "), err


@pytest.mark.parametrize(
    "argv",
    # A missing rules file too, so that a port let through stops the start rather than serving.
    [["serve", "--port", port, "--rules", "/nonexistent/rules.yaml", "--no-reconciler"]
     for port in ("99999", "-1", "8443x")]
    + [["reconcile", "--once", "--metrics-port", "65536", "--kubeconfig", "/nonexistent/kubeconfig"]],
)
def test_a_port_out_of_range_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _exit(argv, capsys)
    assert (code, out) == (2, "")
    assert f"usage: tls-injector {argv[0]}" in "\n".join(err)
    assert "expected a port from" in err[-1]


@pytest.mark.parametrize("command", ["doctor", "reconcile", "bootstrap", "serve"])
@pytest.mark.parametrize("server", ["notaurl", "127.0.0.1:6443", "ftp://host", "https://"])
def test_a_server_that_is_no_url_is_a_usage_error(command: str, server: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # A missing rules file too, so that a server let through stops serve's start rather than serving.
    extra = {"serve": ["--rules", "/nonexistent/rules.yaml", "--no-reconciler"], "reconcile": ["--once"]}
    code, out, err = _exit([command, "--server", server, *extra.get(command, [])], capsys)
    assert (code, out) == (2, "")
    assert "expected http(s)://HOST[:PORT]" in err[-1], err
