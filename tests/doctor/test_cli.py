"""The doctor's command line: usage errors exit 2, an API that answers but fails its reads is a failed
check (exit 1), and the
permissions it asks about are exactly the ones the shipped RBAC grants the reconciler."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doctor.cluster import run
from tests.kubeapi import Emulator
from tests.shipping.rbac import grants_for
from tests.shipping.support import ROOT, render
from tls_injector.cli import main
from tls_injector.doctor.reconciler import required_permissions


@pytest.mark.parametrize("address", ["nohost", "host:", "host:0", "host:70000", "host:http"])
def test_a_malformed_webhook_address_is_a_usage_error(address: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["doctor", "--server", "http://127.0.0.1:9", "--webhook-address", address])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage: tls-injector doctor" in err
    assert "expected HOST:PORT" in err


def test_no_cluster_configured_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["doctor"]) == 2
    assert "no cluster configured" in capsys.readouterr().err


def test_an_api_server_that_answers_then_fails_its_reads_is_one_failed_check(kubeapi: Emulator,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """/version answers (as an apiserver whose etcd is down still does), every read is 503: the report says
    so, with the hint. One that does not answer at all is one line and exit 2 (tests/test_cli_errors.py)."""
    kubeapi.outage(code=503)
    code, out = run(["doctor", "--server", kubeapi.url, "--namespace", "tls-injector"], capsys)
    assert code == 1
    assert out.splitlines()[2].startswith("✖ the Kubernetes API answers: Unavailable")
    assert "hint: check the kubeconfig or --server" in out


def test_the_permissions_asked_are_exactly_what_the_shipped_rbac_grants_the_reconciler() -> None:
    """tests/shipping/test_rbac_from_code.py proves the shipped RBAC is exactly what the code calls; this
    closes the loop, so the doctor asks about every call the reconciler makes and nothing else."""
    grants = grants_for(render(ROOT / "manifests" / "base"), namespace="tls-injector",
                        account="tls-injector-reconciler")
    granted = {(g.verb, g.group, g.resource, g.namespace, g.names) for g in grants}
    asked = {(p.verb, p.group, p.resource, "tls-injector" if p.scope == "own" else None,
              frozenset(p.names) if p.names else None)
             for p in required_permissions(("tls-injector",), "tls-injector-leader")}
    assert asked == granted
