"""The reconciler's status API and page, served from the last pass's snapshot on the operator port."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import httpx
import pytest

from tests.kubeapi import Emulator
from tests.operator.scene import Scene
from tls_injector.reconcile.parts import status as snapshot
from tls_injector.web import status as api
from tls_injector.web.health import Probes, listen
from tls_injector.web.operator import OperatorPort

REQUESTS = 100
PAIRS = [(snapshot.Status, api.Status), (snapshot.CaStatus, api.CertificateAuthority),
         (snapshot.WorkloadStatus, api.Workload), (snapshot.PodStatus, api.Pod), (snapshot.MemberStatus, api.Member),
         (snapshot.Condition, api.Condition)]


@pytest.mark.parametrize(("recorded", "served"), PAIRS, ids=[p[1].__name__ for p in PAIRS])
def test_the_api_models_name_every_field_the_pass_records_and_no_other(recorded: type, served: type) -> None:
    assert [f.name for f in dataclasses.fields(recorded)] == list(served.model_fields)


def test_the_status_api_and_page_say_what_the_last_pass_saw_without_any_key_material(scene: Scene) -> None:
    reads = _reads(scene.emulator)
    body = httpx.get(scene.base + "/api/v1/status").text
    for _ in range(REQUESTS):
        status: dict[str, Any] = scene.status()
    page = httpx.get(scene.base + "/?sort=namespace").text
    # A request reads the last pass's snapshot, never the API: what was read meanwhile is a pass or two
    # that the loop ran on its own (the scene's writes wake it), about 6 reads each, not one per request.
    assert _reads(scene.emulator) - reads < REQUESTS / 4

    assert "PRIVATE KEY" not in body
    assert "BEGIN CERTIFICATE" not in body
    by_secret = {(w["namespace"], w["secret"]): w for w in status["workloads"]}
    assert set(by_secret) == {("ns0", "app0-tls"), ("ns0", "app1-tls"), ("ns0", "late-tls"), ("ns0", "squat-tls"),
                              ("ns1", "app0-tls"), ("ns1", "app1-tls"), ("ns1", "orphan-tls"), ("ns1", "greedy-tls")}
    late = by_secret["ns0", "late-tls"]
    assert late["workloads"] == ["Deployment/late"]
    assert (late["not_after"], late["renew_at"]) == (None, None)
    assert "the new CA" in late["waiting"]
    issued = by_secret["ns0", "app0-tls"]
    assert issued["not_after"] > issued["renew_at"] > status["pass_at"]
    assert issued["waiting"] == ""
    assert status["pods_missing_injection"] == [{"namespace": "ns1", "name": "orphan", "workload": "orphan"}]
    assert status["members"] == []
    assert status["converged"] is False
    workload_cas = [ca for ca in status["cas"] if ca["ca_set"] == "tls-injector-ca"]
    states = sorted(ca["state"] for ca in workload_cas)
    assert states == ["trusted-used", "untrusted"], states
    new = next(ca for ca in workload_cas if ca["state"] == "untrusted")
    assert (new["subject"], new["root"], new["signs"]) == ("CN=user CA 2", True, False)
    assert "is in every trust bundle in use since" in new["waits_for"]
    assert "it signs after 0:05:00" in new["waits_for"]
    assert new["next_step_at"] > status["pass_at"]
    old = next(ca for ca in workload_cas if ca["state"] == "trusted-used")
    assert (old["subject"], old["signs"]) == ("CN=user CA 1", False)  # its key left with the replacement
    assert re.fullmatch(r"[0-9a-f]{16}", new["fingerprint"])

    # The page: attention first (the waiting certificate, the pod without injection, the rotation),
    # then the CAs, then the workloads sorted as asked.
    attention, cas, workloads = page.index("Needs attention"), page.index("Certificate authorities"), page.index(
        "Workloads (8)")
    assert attention < cas < workloads
    head = page[attention:cas]
    assert "ns0/late-tls (Deployment/late) waits" in head
    assert "Pod ns1/orphan (workload orphan) runs without the injection" in head
    assert "CA rotation in tls-injector-ca" in head
    rows = re.findall(r"<tr><td>(ns\d)</td><td>[^<]*</td><td>([^<]+)</td>", page[workloads:])
    assert rows == sorted(rows)
    assert "<script" not in page
    assert "http" not in page  # nothing loaded from anywhere


def test_each_workload_has_a_ready_condition_with_the_reason_and_message_of_its_event(scene: Scene) -> None:
    """cert-manager's style: issued, waiting for a CA, conflict with someone else's Secret (during a CA
    rotation too, when nothing is created: once it read "waits"), refused service names beside the
    rest. Every reason and message is the one of the Warning Event the same pass raised on the workload."""
    by_secret = {(w["namespace"], w["secret"]): w for w in scene.status()["workloads"]}

    def condition(ns: str, secret: str, kind: str = "Ready") -> dict[str, str]:
        return next(c for c in by_secret[ns, secret]["conditions"] if c["type"] == kind)

    issued = condition("ns0", "app0-tls")
    assert (issued["status"], issued["reason"]) == ("True", "Issued")
    assert issued["message"].startswith("issued, valid until ")
    squat = condition("ns0", "squat-tls")
    assert (squat["status"], squat["reason"]) == ("False", "SecretConflict")
    assert squat["message"] == "Secret ns0/squat-tls exists and is not managed by tls-injector"
    assert by_secret["ns0", "squat-tls"]["waiting"] == ""
    late = condition("ns0", "late-tls")
    assert (late["status"], late["reason"]) == ("False", "CertificateWaiting")
    assert "the new CA" in late["message"]
    assert condition("ns1", "greedy-tls")["reason"] == "CertificateWaiting"
    refused = condition("ns1", "greedy-tls", "ServiceNamesRefused")
    assert (refused["status"], refused["reason"]) == ("True", "ServiceNamesRefused")
    assert "'kubernetes.default.svc'" in refused["message"]
    assert [c["type"] for c in by_secret["ns0", "app0-tls"]["conditions"]] == ["Ready"]

    # The Event is raised once while its condition lasts; a wait's message moves on with the CA's step
    # (being added to the bundles, then the settle), the condition says the latest.
    events = {(e["involvedObject"]["name"], e["reason"]): e["message"] for e in scene.emulator.objects("events")}
    for (ns, secret), workload in by_secret.items():
        for c in workload["conditions"]:
            if c["reason"] in ("Issued", "NotIssued"):
                continue
            told = events[secret.removesuffix("-tls"), c["reason"]]
            if c["reason"] == "CertificateWaiting":
                told, c["message"] = told.partition("the new CA")[0], c["message"].partition("the new CA")[0]
            assert told == c["message"], (ns, secret, c)


def test_before_any_pass_the_api_says_so_with_503_and_the_schema_is_served() -> None:
    probes = Probes(healthy=lambda: (True, {}), ready=lambda: (True, {}), metrics=lambda: b"")
    port = OperatorPort(listen("127.0.0.1", 0), api.status_app(probes, lambda: None))
    port.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port.port}") as client:
            _before_any_pass(client)
    finally:
        port.stop()


def _before_any_pass(client: httpx.Client) -> None:
    missing = client.get("/api/v1/status")
    assert (missing.status_code, missing.json()) == (503, {"detail": api.NOT_YET})
    assert client.get("/").status_code == 503
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/api/v1/status"]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Status"}
    components = schema["components"]["schemas"]
    assert set(components["Status"]["properties"]) == {f.name for f in dataclasses.fields(snapshot.Status)}
    assert components["Workload"]["properties"]["not_after"]["anyOf"][0] == {"type": "string",
                                                                             "format": "date-time"}
    assert client.get("/?sort=nonsense").status_code == 422  # a malformed query is the client's error
    assert client.get("/docs").status_code == 404  # the interactive docs would load scripts from the internet


def _reads(emu: Emulator) -> int:
    return sum(emu.calls(verb, resource) for verb in ("list", "get") for resource in ("secrets", "pods"))

