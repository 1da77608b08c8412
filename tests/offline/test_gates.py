"""Gates that do not pass on nothing, and errors in one line: `inject` and `check` refuse input that holds
no Kubernetes object (a failed `helm template` prints nothing) or a document that is not one, and
name the file, the document and, for YAML or JSON that does not parse, the line and column."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tls_injector.cli import main

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, tls-injector.io/inject: "true"}}
    spec:
      containers: [{name: app, image: nginx}]
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


EMPTY = [
    ("an empty file", ""),
    ("only comments", "# helm template failed before printing anything\n"),
    ("empty documents", "---\n---\n"),
    ("an empty List", "apiVersion: v1\nkind: List\nitems: []\n"),
]


@pytest.mark.parametrize(("case", "text"), EMPTY, ids=[c for c, _ in EMPTY])
def test_inject_of_input_with_no_kubernetes_object_is_an_error_unless_allowed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str, text: str
) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(text)
    assert run(capsys, "inject", "-f", str(path)) == (
        2, "", f"tls-injector inject: {path}: no Kubernetes object in it (--allow-empty accepts empty input)\n")
    assert run(capsys, "inject", "--allow-empty", "-f", str(path)) == (0, text, ""), "written back as it is"


def test_an_empty_directory_and_empty_stdin_are_errors_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "notes.txt").write_text("not a manifest")
    code, out, err = run(capsys, "inject", "-f", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == f"tls-injector inject: {tmp_path}: no Kubernetes object in it (--allow-empty accepts empty input)\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert run(capsys, "inject", "-f", "-")[0::2] == (
        2, "tls-injector inject: <stdin>: no Kubernetes object in it (--allow-empty accepts empty input)\n")


NOT_OBJECTS = [
    ("a string", "just text\n", "document 1: expected a Kubernetes object, got a string"),
    ("a number", "42\n", "document 1: expected a Kubernetes object, got a number"),
    ("a list", "- a\n- b\n", "document 1: expected a Kubernetes object, got a list"),
    ("a mapping without kind", "name: web\nimage: nginx\n",
     "document 1: not a Kubernetes object: it needs string apiVersion and kind"),
    ("the third document", DEPLOYMENT + "---\n" + CONFIGMAP + "---\nhello\n",
     "document 3: expected a Kubernetes object, got a string"),
    ("a List item", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n"
                    "- 7\n",
     "document 1 items[1]: expected a Kubernetes object, got a number"),
]


@pytest.mark.parametrize(("text", "says"), [c[1:] for c in NOT_OBJECTS], ids=[c[0] for c in NOT_OBJECTS])
@pytest.mark.parametrize("command", ["inject", "check"])
def test_a_document_that_is_not_a_kubernetes_object_is_an_error_naming_the_file_and_document(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, text: str, says: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    good = tmp_path / "good.yaml"
    good.write_text(DEPLOYMENT)
    argv = ["-f", str(bad)] if command == "inject" else ["--old", str(good), "--new", str(bad)]
    code, out, err = run(capsys, command, *argv)
    assert (code, out) == (2, "")
    assert err == f"tls-injector {command}: {bad}: {says}\n"


def test_check_of_an_empty_new_is_an_error_not_everything_deleted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "empty.yaml"
    old.write_text(DEPLOYMENT + "---\n" + CONFIGMAP)
    new.write_text("")
    assert run(capsys, "check", "--old", str(old), "--new", str(new)) == (
        2, "", f"tls-injector check: {new}: no Kubernetes object in it (--allow-empty accepts empty input)\n")
    code, out, _ = run(capsys, "check", "--allow-empty", "--old", str(old), "--new", str(new))
    assert (code, out) == (0, "0 updated, 0 unchanged, 0 rejected; 0 created and 2 deleted (always allowed)\n")
    assert run(capsys, "check", "--old", str(new), "--new", str(old))[0] == 2, "an empty OLD too"


BAD_TEXT = [
    ("unclosed flow", "bad.yaml", "kind: [unclosed",
     r"1:16: expected ',' or '\]', but got '<stream end>'"),
    ("unclosed flow, more lines", "bad.yaml", "kind: [unclosed\n\n",
     r"3:1: expected ',' or '\]', but got '<stream end>' \(while parsing a flow sequence at line 1\)"),
    ("bad indentation", "bad.yaml", "apiVersion: v1\nkind: Pod\n metadata: x\n",
     r"3:10: mapping values are not allowed here"),
    ("duplicate key", "bad.yaml", "apiVersion: v1\nkind: Pod\nkind: Service\n",
     r'3:1: found duplicate key "kind" with value "Service" \(original value: "Pod"\) '
     r"\(while constructing a mapping at line 1\)"),
    ("unclosed quote", "bad.yaml", "apiVersion: v1\nkind: 'Pod\n",
     r"3:1: found unexpected end of stream \(while scanning a quoted scalar at line 2\)"),
    ("tab", "bad.yaml", "apiVersion: v1\n\tkind: Pod\n", r"2:1: found character '\\t' that cannot start any token"),
    ("bad JSON", "bad.json", '{"apiVersion": "v1",\n "kind": }\n', r"2:10: not valid JSON: Expecting value"),
]


@pytest.mark.parametrize("case", [c[1:] for c in BAD_TEXT], ids=[c[0] for c in BAD_TEXT])
@pytest.mark.parametrize("command", ["inject", "check"])
def test_a_yaml_or_json_error_is_one_line_with_file_line_and_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, case: tuple[str, str, str]
) -> None:
    name, text, says = case
    bad = tmp_path / name
    bad.write_text(text)
    good = tmp_path / "good.yaml"
    good.write_text(DEPLOYMENT)
    argv = ["-f", str(bad)] if command == "inject" else ["--old", str(bad), "--new", str(good)]
    code, out, err = run(capsys, command, *argv)
    assert (code, out) == (2, "")
    assert re.fullmatch(rf"tls-injector {command}: {re.escape(str(bad))}:{says}\n", err), err


@pytest.mark.parametrize("command", ["check", "export-policy"])
def test_a_rules_file_yaml_error_is_one_line_with_file_line_and_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n- name: a\n  expression: 'self == oldSelf\n")
    good = tmp_path / "good.yaml"
    good.write_text(DEPLOYMENT)
    argv = ["--old", str(good), "--new", str(good)] if command == "check" else []
    code, out, err = run(capsys, command, *argv, "--rules", str(rules))
    assert (code, out) == (2, "")
    assert err == (f"tls-injector {command}: {rules}:4:1: found unexpected end of stream "
                   f"(while scanning a quoted scalar at line 3)\n")


@pytest.mark.parametrize("command", ["inject", "check"])
def test_a_file_that_is_not_utf8_is_one_line_saying_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(CONFIGMAP.replace("name: c", "name: caf\xe9").encode("latin-1"))
    argv = ["-f", str(bad)] if command == "inject" else ["--old", str(bad), "--new", str(bad)]
    assert run(capsys, command, *argv) == (
        2, "", f"tls-injector {command}: {bad}: cannot read: not UTF-8 text (byte 0xe9 at offset 51)\n")
