"""`tls-injector check` reports what it judged as it was: unchanged pairs counted apart from updates, a
message that fits the kind it is said to, and the same report as JSON for a CI step (`-o json`)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rules_matrix import OFF, ON_X, ON_Y, WORKLOAD_KINDS, cronjob, workload
from tls_injector.cli import main


def write(path: Path, *objects: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["check", *argv])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("kind", [*WORKLOAD_KINDS, "CronJob"])
def test_a_rejection_speaks_to_the_kind_it_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    make = cronjob if kind == "CronJob" else functools.partial(workload, kind)
    code, out = run(capsys, "--old", write(tmp_path / "old.yaml", make(ON_X)),
                    "--new", write(tmp_path / "new.yaml", make(OFF)))
    assert code == 1
    assert "delete and recreate the object" in out
    assert "tls-injector.io/tls-change" in out  # how to ask for the exception instead
    assert "PVC" not in out, "a Deployment, DaemonSet or CronJob has no PersistentVolumeClaims to keep"


def test_unchanged_objects_are_not_counted_as_updated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = [workload("Deployment", ON_X, name=f"same-{i}") for i in range(3)]
    old = write(tmp_path / "old.yaml", *same, workload("Deployment", OFF, name="changed"))
    new = write(tmp_path / "new.yaml", *same, workload("Deployment", ON_X, name="changed"))
    code, out = run(capsys, "--old", old, "--new", new)
    assert code == 0
    assert out.splitlines()[-1] == "1 updated, 3 unchanged, 0 rejected; 0 created and 0 deleted (always allowed)"
    assert "allowed: apps/v1 Deployment shop/same-0 (unchanged)" in out
    assert "allowed: apps/v1 Deployment shop/changed\n" in out


def test_json_output_is_one_object_with_each_pair_and_the_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml", workload("Deployment", ON_X, name="a"), workload("StatefulSet", ON_X, name="b"),
                workload("DaemonSet", ON_X, name="gone"))
    new = write(tmp_path / "new.yaml", workload("Deployment", ON_Y, name="a"), workload("StatefulSet", ON_X, name="b"),
                workload("Deployment", OFF, name="new"))
    code, out = run(capsys, "--old", old, "--new", new, "-o", "json")
    assert code == 1
    report = json.loads(out)
    assert report["allowed"] is False
    assert report["counts"] == {"updated": 1, "unchanged": 1, "rejected": 1, "created": 1, "deleted": 1}
    swapped, same = report["pairs"]
    assert {k: swapped[k] for k in ("apiVersion", "kind", "namespace", "name", "changed", "allowed")} == {
        "apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "a", "changed": True,
        "allowed": False}
    assert "delete and recreate the object" in swapped["message"]
    assert {k: v for k, v in same.items() if k != "warnings"} == {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "namespace": "shop", "name": "b", "changed": False,
        "allowed": True, "message": ""}


def test_json_output_of_an_allowed_update_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "--old", write(tmp_path / "old.yaml", workload("Deployment", OFF)),
                    "--new", write(tmp_path / "new.yaml", workload("Deployment", ON_X)), "-o", "json")
    assert code == 0
    report = json.loads(out)
    assert report["allowed"] is True
    assert report["pairs"][0]["warnings"], "enabling in place warns that the pods will roll"
