"""The cluster domain at the edge: --cluster-domain wins, else the pod's resolv.conf, else cluster.local."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, data, small_cluster
from tls_injector.cli import main
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.pki import load_certificates
from tls_injector.pki.verify import dns_sans

IN_A_POD = """search tls-injector.svc.k8s.corp.example svc.k8s.corp.example k8s.corp.example
nameserver 10.96.0.10
options ndots:5
"""


def _settings(tmp_path: Path, resolv_conf: str | None, *flags: str) -> tuple[str, str]:
    path = tmp_path / "resolv.conf"
    if resolv_conf is not None:
        path.write_text(resolv_conf)
    args = _parser().parse_args(["reconcile", "--namespace", OWN_NS, *flags])
    settings = settings_for(args, resolv_conf=path)
    assert settings.webhook is not None
    assert settings.webhook.cluster_domain == settings.cluster_domain  # the webhook's own SANs agree
    return settings.cluster_domain, str(path)


def test_the_domain_comes_from_resolv_conf_and_the_log_says_so(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tls_injector.reconcile"):
        domain, path = _settings(tmp_path, IN_A_POD)
    assert domain == "k8s.corp.example"
    (record,) = [r for r in caplog.records if r.getMessage() == "cluster domain"]
    assert (record.domain, record.source) == ("k8s.corp.example", f"search path of {path}")  # type: ignore[attr-defined]


def test_the_flag_overrides_resolv_conf(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tls_injector.reconcile"):
        domain, _ = _settings(tmp_path, IN_A_POD, "--cluster-domain", "Other.Example.")
    assert domain == "other.example"
    (record,) = [r for r in caplog.records if r.getMessage() == "cluster domain"]
    assert record.source == "--cluster-domain"  # type: ignore[attr-defined]


@pytest.mark.parametrize("content", [None, "nameserver 169.254.169.254\nsearch c.proj.internal\n", "\x00\xff" * 10])
def test_without_a_kubelet_search_path_the_default_is_used_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str | None
) -> None:
    with caplog.at_level(logging.INFO, logger="tls_injector.reconcile"):
        domain, path = _settings(tmp_path, content)
    assert domain == "cluster.local"
    (record,) = [r for r in caplog.records if r.getMessage() == "cluster domain"]
    assert record.source == f"default: no svc.<domain> search entry in {path}"  # type: ignore[attr-defined]


def test_a_flag_that_is_not_a_domain_is_one_line_and_exit_two(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["reconcile", "--once", "--cluster-domain", "cluster local!"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith("argument --cluster-domain: not a DNS domain (labels of letters, digits "
                                         "and inner hyphens): 'cluster local!'")
    assert "Traceback" not in err


def test_the_leaves_carry_the_domain_given(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=1, per_namespace=1)
    assert main(["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS,
                 "--cluster-domain", "corp.example", "--log-level", "error"]) == 0
    ((ns, name),) = secrets
    leaf = load_certificates(data(kubeapi.get("secrets", name, ns))["tls.crt"])[0]
    assert "app0.ns0.svc.corp.example" in dns_sans(leaf)
