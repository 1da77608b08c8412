"""`--help` speaks to the person running the command: what it is, each command's description and
examples that parse as written, and `serve`'s flags in groups rather than one long list."""

from __future__ import annotations

import re
import shlex

import pytest

from tls_injector.cli import main
from tls_injector.cli.command import Command
from tls_injector.cli.parser import COMMANDS, build_parser

DESCRIBED = ("serve", "reconcile", "inject", "check", "doctor")


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_the_top_help_says_what_it_is_not_how_the_code_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys)
    assert "wire the parts together" not in text
    assert "parse flags" not in text
    assert text.split("\n\n")[1].startswith("Give every workload that opts in working TLS")
    assert 'tls-injector.io/inject: "true"' in text, "the label whole, not broken at its hyphen"
    assert "tls-injector serve" in text.split("a first look, without a cluster:")[1]


@pytest.mark.parametrize("name", DESCRIBED)
def test_each_command_has_a_description_and_examples(capsys: pytest.CaptureFixture[str], name: str) -> None:
    text = help_of(capsys, name)
    description = text.split("\n\n")[1]
    assert not description.startswith(("options:", "usage:"))
    assert len(description) > 80
    assert "\nexamples:\n  " in text


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.examples], ids=lambda c: c.name)
def test_every_example_parses_as_written(command: Command) -> None:
    """Each `tls-injector ...` part of an example (pipelines, redirections and `<(...)` too) is accepted by
    the parser: no example names a flag that does not exist or a value the flag refuses."""
    for example in command.examples:
        for part in re.split(r"\||>|<\(|\)", example.split("#", 1)[0]):
            words = shlex.split(part)
            if words and words[0] == "tls-injector":
                args, unknown = build_parser().parse_known_args(words[1:])
                assert not unknown, example
                assert args.command_parser.prog == f"tls-injector {command.name}"


def test_serve_help_groups_its_flags_and_keeps_its_usage_short(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "serve")
    assert text.startswith("usage: tls-injector serve [flags]\n")
    headings = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert headings == ["options:", "listening and TLS:", "what /mutate and /validate do:",
                        "the cluster and the reconciler:", "limits of the HTTPS port:", "examples:"]
    limits = text.split("limits of the HTTPS port:")[1].split("examples:")[0]
    assert all(flag in limits for flag in ("--max-connections", "--max-body-bytes", "--idle-timeout"))
    assert "--kubeconfig" in text.split("the cluster and the reconciler:")[1].split("limits of")[0]


def test_serve_parses_the_same_flags_as_before_grouping() -> None:
    args = build_parser().parse_args(["serve", "--port", "9443", "--rules", "r.yaml", "--no-reconciler",
                                      "--max-body-bytes", "1024", "--default-mode", "secret", "--timeout", "1m30s"])
    assert (args.port, str(args.rules), args.no_reconciler, args.max_body_bytes, args.timeout) == (
        9443, "r.yaml", True, 1024, 90.0)


@pytest.mark.parametrize(("argv", "says"), [
    (["serve", "--workers", "many"], 'got "many"'),
    (["serve", "--port", "99999"], 'got "99999"'),
    (["doctor", "--timeout", "1d"], 'got "1d"'),
    (["reconcile", "--namespace", "Bad_NS"], '"Bad_NS"'),
    (["doctor", "--webhook-address", "nohost"], 'got "nohost"'),
])
def test_a_refused_flag_value_is_quoted_as_typed_not_as_a_python_repr(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert says in err
    assert "'" not in err.splitlines()[-1], err
