"""`tls-injector check`: exit 0 allowed, 1 rejected, 2 bad input; whole sets of manifests paired by key."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rules_matrix import (
    ENABLED_NAMESPACE_TRANSITIONS,
    EXAMPLE_RULES,
    FIX,
    NAMESPACE_ENABLED_WARNING,
    NAMESPACE_FIX,
    NAMESPACE_TRANSITIONS,
    OFF,
    ON_X,
    ON_Y,
    OPTED_OUT,
    ROLL,
    ROOT,
    Transition,
    cronjob,
    namespace,
    sei_node,
    templated,
    workload,
)
from tls_injector.cli import main


def write(path: Path, *objects: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "case",
    [
        ("unchanged", ON_X, ON_X, 0, "allowed: apps/v1 Deployment shop/web"),
        ("enable", OFF, ON_X, 0, ROLL),
        ("swap", ON_X, ON_Y, 1, "REJECTED: apps/v1 Deployment shop/web"),
        ("disable", ON_X, OFF, 1, FIX),
    ],
    ids=lambda case: case[0],
)
def test_the_exit_status_is_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: tuple[str, Any, Any, int, str]
) -> None:
    _, old, new, code, says = case
    before = write(tmp_path / "old.yaml", workload("Deployment", old))
    after = write(tmp_path / "new.yaml", workload("Deployment", new))
    status, out, _ = run(capsys, "--old", str(before), "--new", str(after))
    assert status == code
    assert says in out


def test_a_whole_diff_of_manifests_is_paired_by_kind_namespace_and_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = [workload("Deployment", ON_X, name="a"), workload("StatefulSet", ON_X, name="a"),
           workload("DaemonSet", ON_X, name="removed"), sei_node({"secretName": "x"})]
    new = [workload("StatefulSet", ON_X, name="a"), workload("Deployment", ON_Y, name="a"),
           workload("Deployment", OFF, name="added"), sei_node(None)]
    write(tmp_path / "before" / "apps.yaml", *old[:2])
    (tmp_path / "before" / "more").mkdir()
    (tmp_path / "before" / "more" / "list.json").write_text(json.dumps({"kind": "List", "items": old[2:]}))
    write(tmp_path / "after" / "all.yml", *new)
    status, out, _ = run(capsys, "--old", str(tmp_path / "before"), "--new", str(tmp_path / "after"),
                         "--rules", str(EXAMPLE_RULES))
    assert status == 1
    assert "allowed: apps/v1 StatefulSet shop/a (unchanged)" in out
    assert "REJECTED: apps/v1 Deployment shop/a\n" in out
    assert "REJECTED: example.com/v1 SeiNode chain/node-0\n" in out
    assert "2 updated, 1 unchanged, 2 rejected; 1 created and 1 deleted (always allowed)" in out


def test_old_can_come_from_stdin_as_from_git_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump(workload("Deployment", ON_X))))
    after = write(tmp_path / "new.yaml", workload("Deployment", OFF))
    assert run(capsys, "--old", "-", "--new", str(after))[0] == 1


@pytest.mark.parametrize(
    ("case", "old_text", "says"),
    [
        ("bad YAML", "kind: [", "old.yaml:1:8: expected the node content, but found '<stream end>'"),
        ("not an object", "- a\n- b\n", "old.yaml: document 1: expected a Kubernetes object, got a list"),
        ("no name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
         "needs string apiVersion, kind and metadata.name"),
        ("duplicate", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
                      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "appears twice"),
    ],
)
def test_unusable_input_exits_2_with_the_file_and_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, old_text: str, says: str
) -> None:
    (tmp_path / "old.yaml").write_text(old_text)
    after = write(tmp_path / "new.yaml", workload("Deployment", ON_X))
    status, out, err = run(capsys, "--old", str(tmp_path / "old.yaml"), "--new", str(after))
    assert status == 2
    assert says in err
    assert "old.yaml" in err
    assert out == ""


def test_a_missing_file_or_a_bad_rules_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path / "m.yaml", workload("Deployment", ON_X))
    assert run(capsys, "--old", str(tmp_path / "nope.yaml"), "--new", str(manifest))[0] == 2
    bad_rules = tmp_path / "rules.yaml"
    bad_rules.write_text("rules: [{name: x}]\n")
    status, _, err = run(capsys, "--old", str(manifest), "--new", str(manifest), "--rules", str(bad_rules))
    assert status == 2
    assert "missing required field 'match'" in err


def test_the_installed_entry_point_exits_with_the_verdict(tmp_path: Path) -> None:
    before = write(tmp_path / "old.yaml", workload("Deployment", ON_X))
    after = write(tmp_path / "new.yaml", workload("Deployment", ON_Y))
    command = [sys.executable, "-m", "tls_injector", "check", "--old", str(before), "--new", str(after)]
    rejected = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    usage = subprocess.run(command[:-2], capture_output=True, text=True, cwd=ROOT, check=False)
    assert (rejected.returncode, usage.returncode) == (1, 2)
    assert '"x-tls" -> "y-tls"' in rejected.stdout


def test_unquoted_dates_stay_strings_as_kubernetes_reads_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = ("apiVersion: example.com/v1\nkind: SeiNode\nmetadata: {name: n}\n"
            "spec:\n  sidecar:\n    tls: {secretName: x, notAfter: 2030-01-01}\n")
    before, after = tmp_path / "old.yaml", tmp_path / "new.yaml"
    before.write_text(text)
    after.write_text(text)
    status, out, _ = run(capsys, "--old", str(before), "--new", str(after), "--rules", str(EXAMPLE_RULES))
    assert (status, out.splitlines()[0]) == (0, "allowed: example.com/v1 SeiNode n (unchanged)")


@pytest.mark.parametrize(
    "case",
    [("unchanged", ON_X, ON_X, 0, "allowed: batch/v1 CronJob shop/nightly"), ("enable", OFF, ON_X, 0, ROLL),
     ("swap", ON_X, ON_Y, 1, "cronjob-tls-transition"), ("disable", ON_X, OFF, 1, FIX)],
    ids=lambda case: case[0],
)
def test_a_cronjob_is_judged_on_its_job_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: tuple[str, Any, Any, int, str]
) -> None:
    _, old, new, code, says = case
    status, out, _ = run(capsys, "--old", str(write(tmp_path / "old.yaml", cronjob(old))),
                         "--new", str(write(tmp_path / "new.yaml", cronjob(new))))
    assert (status, says in out) == (code, True), out


@pytest.mark.parametrize("case", NAMESPACE_TRANSITIONS, ids=lambda case: case[0])
def test_a_namespace_may_gain_the_opt_in_but_not_lose_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: tuple[str, str | None, str | None, bool]
) -> None:
    _, old_label, new_label, allowed = case
    status, out, _ = run(capsys, "--old", str(write(tmp_path / "old.yaml", namespace(old_label))),
                         "--new", str(write(tmp_path / "new.yaml", namespace(new_label, team="checkout"))))
    assert status == (0 if allowed else 1), out
    assert (NAMESPACE_FIX in out) is not allowed
    assert (NAMESPACE_ENABLED_WARNING in out) is (old_label != "enabled" and new_label == "enabled")


@pytest.mark.parametrize("how", ["flag", "namespace-in-old", "namespace-in-new", "namespace-enabled-by-the-change"])
@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
@pytest.mark.parametrize("transition", ENABLED_NAMESPACE_TRANSITIONS, ids=lambda t: t.name)
def test_a_workload_in_an_enabled_namespace_is_judged_by_the_enabled_namespace_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], transition: Transition, kind: str, how: str
) -> None:
    old_objects, new_objects = [templated(kind, transition.old)], [templated(kind, transition.new)]
    flags: list[str] = []
    if how == "flag":
        flags = ["--namespace-enabled", "other", "--namespace-enabled", "shop"]
    else:
        old_label = None if how == "namespace-enabled-by-the-change" else "enabled"
        old_objects.append(namespace(old_label))
        new_objects.append(namespace(None if how == "namespace-in-old" else "enabled"))
    status, out, _ = run(capsys, "--old", str(write(tmp_path / "old.yaml", *old_objects)),
                         "--new", str(write(tmp_path / "new.yaml", *new_objects)), *flags)
    title = f"{'batch/v1 CronJob shop/nightly' if kind == 'CronJob' else 'apps/v1 Deployment shop/web'}"
    assert f"{'allowed' if transition.allowed else 'REJECTED'}: {title}" in out
    assert (ROLL in out) is transition.warns
    # A Namespace losing its label is itself rejected, which is why OLD's label counts as enabled.
    assert status == (0 if transition.allowed and how != "namespace-in-old" else 1), out


def test_without_the_namespace_being_enabled_an_opt_out_is_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = write(tmp_path / "old.yaml", workload("Deployment", OFF)), write(
        tmp_path / "new.yaml", workload("Deployment", OPTED_OUT))
    assert run(capsys, "--old", str(old), "--new", str(new))[0] == 0
    status, out, _ = run(capsys, "--old", str(old), "--new", str(new), "--namespace-enabled", "shop")
    assert status == 1
    assert 'rule "enabled-namespace-workload-tls-transition"' in out
    assert run(capsys, "--old", str(old), "--new", str(new), "--namespace-enabled", "elsewhere")[0] == 0


def test_an_enabled_namespace_is_judged_by_its_own_rules_only(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Dropping a "true" disables TLS elsewhere, but in an enabled namespace TLS stays on: the
    apiserver sends that update to /validate/enabled-namespace only, and check does the same."""
    old, new = write(tmp_path / "old.yaml", workload("Deployment", ON_X)), write(
        tmp_path / "new.yaml", workload("Deployment", (None, "x-tls")))
    status, out, _ = run(capsys, "--old", str(old), "--new", str(new))
    assert status == 1
    assert 'rule "workload-tls-transition"' in out
    assert run(capsys, "--old", str(old), "--new", str(new), "--namespace-enabled", "shop")[0] == 0
    opted_out = write(tmp_path / "out.yaml", workload("Deployment", ("false", "x-tls")))
    status, out, _ = run(capsys, "--old", str(old), "--new", str(opted_out), "--namespace-enabled", "shop")
    assert status == 1
    assert 'rule "enabled-namespace-workload-tls-transition"' in out
    assert 'rule "workload-tls-transition"' not in out
