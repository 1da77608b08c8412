"""What `doctor` and `reconcile --once` print is for people and scripts: `doctor -o json` is JSON even when
there is no cluster to read, each category heading is printed once, and counts are words, not dicts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tls_injector.cli import main
from tls_injector.doctor.ca import CATEGORY as CA_CATEGORY
from tls_injector.doctor.model import error, ok, render_text
from tls_injector.reconcile.loop.runner import summary
from tls_injector.reconcile.parts.reconciler import PassReport


def test_doctor_json_without_a_cluster_is_one_failed_check_on_stdout_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["doctor", "-o", "json"]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["ok"] is False
    assert report["summary"] == {"ok": 0, "warning": 0, "error": 1}
    (check,) = report["checks"]
    assert check["status"] == "error"
    assert check["message"].startswith("no cluster configured")
    assert err.startswith("tls-injector doctor: no cluster configured")


def test_doctor_json_with_an_api_server_that_does_not_answer_is_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "-o", "json", "--server", "http://127.0.0.1:9", "--timeout", "2s"]) == 2
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check["message"].startswith("cannot reach the API server")


def test_each_category_heading_is_printed_once_where_it_first_appears() -> None:
    results = [ok("webhook", "a"), ok(CA_CATEGORY, "b"), ok("workloads", "c"), ok("client certificates", "d"),
               error(CA_CATEGORY, "e", "broken", hint="fix it")]
    text = render_text(results)
    assert text.count(f"\n{CA_CATEGORY}\n") + text.startswith(f"{CA_CATEGORY}\n") == 1
    lines = text.splitlines()
    assert lines.index("✔ b") < lines.index("✖ e: broken") < lines.index("workloads")


@pytest.mark.parametrize(("writes", "says"), [
    (Counter(), "converged: 0 writes"),
    (Counter(create=2), "converged: 2 writes (2 create)"),
    (Counter(update=1, create=2, delete=0), "converged: 3 writes (2 create, 1 update)"),
])
def test_a_pass_summary_counts_writes_in_words(writes: Counter[str], says: str) -> None:
    line = summary(PassReport(writes=writes))
    assert line == says
    assert "{" not in line
