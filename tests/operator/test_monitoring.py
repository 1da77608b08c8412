"""The monitoring component: alert rules unit-tested with promtool, every alert documented, and every
metric an alert or a dashboard panel queries exported by the program (read from a live /metrics of the
webhook and of the reconciler), so a renamed metric breaks the build, not the pager."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.operator.scene import Scene
from tests.support.server import running_server

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "components" / "monitoring"
RULES = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
PROMTOOL_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOK = ROOT / "docs" / "operations.md"
METRIC = re.compile(r"\btls_injector_[a-z0-9_]+\b")


def alert_rules() -> list[dict[str, Any]]:
    spec = yaml.safe_load(RULES.read_text())["spec"]
    return [rule for group in spec["groups"] for rule in group["rules"]]


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: `python3.11 tools/dev.py test` installs Debian's prometheus (as root)"
    return found


def run_promtool_tests(rules: dict[str, Any], workdir: Path) -> subprocess.CompletedProcess[str]:
    (workdir / "rules.yaml").write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}, sort_keys=False))
    shutil.copy(PROMTOOL_TESTS, workdir / "alerts_test.yaml")
    checked = subprocess.run([promtool(), "check", "rules", str(workdir / "rules.yaml")], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return subprocess.run([promtool(), "test", "rules", str(workdir / "alerts_test.yaml")], capture_output=True,
                          text=True, check=False)


def test_promtool_passes_every_alert_firing_and_not_firing(tmp_path: Path) -> None:
    result = run_promtool_tests(yaml.safe_load(RULES.read_text()), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_fails_when_a_threshold_moves(tmp_path: Path) -> None:
    """The unit tests pin the objectives: an error ratio objective of 50% instead of 1% fails them."""
    text = RULES.read_text().replace("sum(rate(tls_injector_admission_requests_total[5m])) > 0.01",
                                     "sum(rate(tls_injector_admission_requests_total[5m])) > 0.5")
    assert text != RULES.read_text()
    result = run_promtool_tests(yaml.safe_load(text), tmp_path)
    assert result.returncode != 0
    assert "TLSInjectorAdmissionErrors" in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_quiet_and_has_a_summary_and_a_runbook_section() -> None:
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    cases = [case for group in tests for case in group["alert_rule_test"]]
    headings = {_anchor(h) for h in re.findall(r"^### (.+)$", RUNBOOK.read_text(), re.MULTILINE)}
    for rule in alert_rules():
        name = rule["alert"]
        own = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in own), f"{name} is never tested firing"
        assert any(not case["exp_alerts"] for case in own), f"{name} is never tested quiet"
        annotations = rule["annotations"]
        assert annotations["summary"]
        assert annotations["description"]
        assert annotations["runbook_url"] == f"docs/operations.md#{name.lower()}"
        assert name.lower() in headings, f"docs/operations.md has no section ### {name}"
        assert rule["labels"]["severity"] in ("warning", "critical")


def queried_metrics() -> dict[str, set[str]]:
    """Every tls_injector_* name each alert and dashboard panel queries, by where it is queried."""
    found: dict[str, set[str]] = {}
    for rule in alert_rules():
        found[f"alert {rule['alert']}"] = set(METRIC.findall(rule["expr"]))
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        found[f"panel {panel['title']!r}"] = {m for t in panel["targets"] for m in METRIC.findall(t["expr"])}
    return found


def exported(text: str) -> set[str]:
    """The sample names an exposition can carry: the families it declares (with their suffixes), and
    every sample it holds. A labelled family with no child yet is declared all the same."""
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        base = name.removesuffix("_total")
        names |= {"counter": {f"{base}_total"}, "histogram": {f"{base}_bucket", f"{base}_sum", f"{base}_count"},
                  "gauge": {name}}.get(kind, {name})
    return names


def test_every_metric_an_alert_or_panel_queries_is_exported_by_the_webhook_or_the_reconciler(
    scene: Scene, tmp_path: Path
) -> None:
    with running_server(tmp_path, probes=True) as webhook:
        webhook_metrics = exported(httpx.get(webhook.probe_url + "/metrics").text)
    reconciler_metrics = exported(httpx.get(scene.base + "/metrics").text)
    assert "tls_injector_admission_requests_total" in webhook_metrics
    assert "tls_injector_leader" in reconciler_metrics
    program = webhook_metrics | reconciler_metrics
    queried = queried_metrics()
    # An alert on Prometheus's own `up` (TLSInjectorMetricsAbsent) queries none of ours, on purpose.
    on_up = {f"alert {r['alert']}" for r in alert_rules() if re.search(r"\bup\{", r["expr"])}
    assert on_up == {"alert TLSInjectorMetricsAbsent"}
    assert [where for where, names in queried.items() if not names and where not in on_up] == []
    missing = {where: sorted(names - program) for where, names in queried.items() if names - program}
    assert missing == {}
    # And the other way round: every metric the program exports is on the dashboard or behind an alert.
    used = set().union(*queried.values())
    unused = {m for m in program if m.startswith("tls_injector_") and not m.endswith(("_created", "_sum", "_count"))}
    assert sorted(unused - used) == [], "add a panel for each to manifests/components/monitoring/grafana-dashboard.json"


@pytest.mark.parametrize("name", ["TLSInjectorCertificateExpiringSoon", "TLSInjectorNoLeader"])
def test_a_renamed_metric_is_caught(name: str) -> None:
    rule = next(r for r in alert_rules() if r["alert"] == name)
    assert METRIC.findall(rule["expr"].replace("tls_injector_", "tls_injector_renamed_"))[0] not in exported(
        "# TYPE tls_injector_leader gauge\ntls_injector_leader 1.0\n"
        "# TYPE tls_injector_certificate_expiry_timestamp_seconds gauge\n")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, spaces to dashes, punctuation dropped."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize(("path", "edit"), [
    ("servicemonitor.yaml", lambda d: d["spec"]["endpoints"][0].__setitem__("intreval", "30s")),
    ("prometheusrule.yaml", lambda d: d["spec"]["groups"][0]["rules"][0].__setitem__("for", "15 minutes")),
])
def test_the_shipping_schema_check_refuses_a_misspelt_monitoring_field(path: str, edit: Any) -> None:
    import jsonschema

    from tests.shipping.test_schema import validate

    doc = yaml.safe_load((MONITORING / path).read_text())
    validate(doc)
    edit(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


# The labels the Prometheus Operator puts on every series it scrapes through the ServiceMonitor
# (servicemonitor.yaml): the target's, added to the labels /metrics gives.
TARGET = {"job": "tls-injector-reconciler", "namespace": "tls-injector", "service": "tls-injector-reconciler",
          "endpoint": "metrics", "container": "reconciler", "pod": "tls-injector-reconciler-7d9f-a",
          "instance": "10.0.0.5:8080"}


def live_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of `name` in an exposition, with its labels as scraped (the target's added)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [({**s.labels, **TARGET}, s.value) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name]


def series(labels: dict[str, str], name: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_the_ca_rotation_alert_fires_on_a_ca_that_steps_from_untrusted_to_trusted_unused_and_stops_there(
    scene: Scene, tmp_path: Path
) -> None:
    """A rotation stuck for 42 minutes, 20 of them untrusted and 22 trusted-unused, is stuck for over 30,
    as the table says, although neither state lasted 30. The series are the reconciler's own, read from a
    live /metrics (the scene's new user CA waits untrusted), with the labels a scrape adds."""
    name = "tls_injector_ca_expiry_timestamp_seconds"
    found = [(labels, value) for labels, value in live_samples(httpx.get(scene.base + "/metrics").text, name)
             if labels["state"] == "untrusted"]
    assert found, "the scene's new CA is not untrusted on /metrics"
    labels, value = found[0]
    rule = next(r for r in alert_rules() if r["alert"] == "TLSInjectorCARotationStuck")
    stepped = {**labels, "state": "trusted-unused"}
    case = {"interval": "1m", "input_series": [
        {"series": series(labels, name), "values": f"{value:.0f}x19 _x40"},  # minutes 0-19
        {"series": series(stepped, name), "values": f"_x19 {value:.0f}x40"},  # minutes 20-59
    ], "alert_rule_test": [
        {"eval_time": "29m", "alertname": rule["alert"], "exp_alerts": []},
        {"eval_time": "42m", "alertname": rule["alert"], "exp_alerts": [{
            "exp_labels": {"severity": "warning", "fingerprint": labels["fingerprint"]},
            "exp_annotations": {**rule["annotations"], "summary": rule["annotations"]["summary"].replace(
                "{{ $labels.fingerprint }}", labels["fingerprint"])}}]},
    ]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": yaml.safe_load(RULES.read_text())["spec"]["groups"]},
                                                        sort_keys=False))
    (tmp_path / "live_test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                             "tests": [case]}, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(tmp_path / "live_test.yaml")], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
