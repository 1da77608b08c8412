"""The chart's rendering installed into the API emulator the way a cluster gets it, then healthy.

`kubectl apply` (for real, not a dry run) of `helm template`'s objects after the namespace, the bootstrap
hook run with the Job's own command line, a reconcile pass, the leader Lease, a real `serve` on loopback
with the Secret the install produced, pods admitted through it: `tls-injector doctor` then passes every
check. A second `kubectl apply` with other values stands for `helm upgrade` (a three-way merge like
Helm's client-side one; the emulator has no server-side apply) and must keep the CAs, every issued
certificate and every caBundle.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.doctor.cluster import admit, healthy_cluster, lead, pod_of, reconcile, run, serving_files, workloads
from tests.kubeapi import Emulator, running_emulator
from tests.shipping.helm import template_text
from tests.shipping.support import ROOT, Obj, kubectl
from tests.support.server import running_server
from tls_injector.cli import build_handlers, main
from tls_injector.settings import ServeSettings

pytestmark = pytest.mark.timeout(300)  # may fetch helm first (see tests/shipping/helm.py)

NS = "tls-injector"
Key = tuple[str, str | None, str]


def key(obj: Obj) -> Key:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def is_hook(obj: Obj) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


@dataclass
class Release:
    emu: Emulator
    config: Path
    objects: list[Obj]

    def apply(self, *values: str) -> list[str]:
        """`helm template` with these `--set` values, then `kubectl apply` of every object but the hook;
        returns kubectl's `<kind>/<name> <what>` lines."""
        self.objects = [o for o in yaml.safe_load_all(template_text(*values)) if o]
        manifest = self.config.parent / "release.yaml"
        manifest.write_text(yaml.safe_dump_all([o for o in self.objects if not is_hook(o)]))
        return self.kubectl("apply", "--validate=false", "-f", str(manifest)).splitlines()

    def kubectl(self, *args: str) -> str:
        result = subprocess.run([kubectl(), "--kubeconfig", str(self.config), *args], capture_output=True,
                                text=True, check=False, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def run_hook(self) -> int:
        """What the post-install/post-upgrade Job runs, with its own arguments."""
        [job] = [o for o in self.objects if is_hook(o)]
        return main([*job["spec"]["template"]["spec"]["containers"][0]["args"], f"--server={self.emu.url}"])


@contextmanager
def serving(emu: Emulator, tmp_path: Path) -> Iterator[str]:
    """The webhook as its pods run it: the serving Secret the install made, mounted as files."""
    cert, key_file = serving_files(emu, tmp_path / "serving")
    mutate, validate = build_handlers(ServeSettings())
    with running_server(tmp_path, mutate=mutate, validate=validate, cert_file=cert, key_file=key_file,
                        ca_file=cert) as server:
        yield f"127.0.0.1:{server.url.rpartition(':')[2]}"


def doctor(emu: Emulator, address: str, capsys: Any) -> tuple[int, str]:
    return run(["doctor", "--server", emu.url, "--namespace", NS, "--webhook-address", address], capsys)


def checks(report: str) -> list[str]:
    """Each check's symbol and title, without its details (names, ports, times)."""
    return [line.split(":", 1)[0] for line in report.splitlines() if line[:2] in ("✔ ", "⚠ ", "✖ ")]


def kustomize_install_checks(tmp_path: Path, capsys: Any) -> list[str]:
    """The doctor's checks on the same workloads installed from the kustomize manifests
    (tests/doctor/cluster.py), for the chart's install to match check for check."""
    with running_emulator(seed=0) as emu, healthy_cluster(emu, tmp_path / "kustomize") as cluster:
        code, out = run(cluster.doctor(), capsys)
    assert code == 0, out
    return checks(out)


@pytest.fixture
def release(kubeapi: Emulator, tmp_path: Path) -> Release:
    """The namespace first (docs/install.md, step 0), then the chart with its defaults and the hook."""
    config = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
    installed = Release(kubeapi, config, [])
    installed.kubectl("apply", "--validate=false", "-f", str(ROOT / "manifests/base/namespace.yaml"))
    lines = installed.apply()
    assert len(lines) == len([o for o in installed.objects if not is_hook(o)])
    assert all(line.endswith(" created") for line in lines), lines
    assert installed.run_hook() == 0
    return installed


def test_the_chart_installs_into_the_emulator_reconciles_and_passes_doctor(
    release: Release, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    emu, now = release.emu, datetime.now(UTC)
    workloads(emu)
    reconcile(emu, now)
    lead(emu, now)
    with serving(emu, tmp_path) as address:
        for name, ns in (("web", "shop"), ("api", "plain")):
            admit(emu, address, pod_of(emu, name, ns))
        code, out = doctor(emu, address, capsys)
    assert code == 0, out
    assert checks(out) == kustomize_install_checks(tmp_path, capsys), out
    assert checks(out), out
    assert all(check.startswith("✔ ") for check in checks(out)), out


def test_nothing_the_reconciler_or_the_hook_writes_is_an_object_of_the_chart(release: Release) -> None:
    emu = release.emu
    chart = {key(o) for o in release.objects if not is_hook(o)}
    workloads(emu)
    reconcile(emu, datetime.now(UTC))
    lead(emu, datetime.now(UTC))
    assert release.run_hook() == 0
    owned = {(kind, o["metadata"].get("namespace"), o["metadata"]["name"])
             for plural, kind in (("secrets", "Secret"), ("configmaps", "ConfigMap"), ("leases", "Lease"))
             for o in emu.objects(plural)}
    assert {("Secret", NS, "tls-injector-webhook-ca"), ("Secret", NS, "tls-injector-webhook-tls"),
            ("Secret", "plain", "api-tls"), ("Lease", NS, "tls-injector-leader")} <= owned, owned
    assert not owned & chart, "an upgrade or uninstall would delete what the reconciler owns"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        [config] = [o for o in release.objects if o["kind"] == kind]
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])


def _state(emu: Emulator) -> dict[str, Any]:
    """What an upgrade must keep: every Secret's data (CAs and issued certificates) and every caBundle."""
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s.get("data") for s in emu.objects("secrets")}
    bundles = {(plural, hook["name"]): hook["clientConfig"].get("caBundle")
               for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
               for hook in (emu.get(plural, "tls-injector") or {}).get("webhooks", [])}
    return {"secrets": secrets, "caBundles": bundles}


def test_an_upgrade_with_other_values_keeps_the_cas_the_certificates_and_every_caBundle(
    release: Release, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    emu, now = release.emu, datetime.now(UTC)
    workloads(emu)
    reconcile(emu, now)
    lead(emu, now)
    before = _state(emu)
    assert len(before["secrets"]) >= 4
    assert all(before["caBundles"].values())
    lines = release.apply("--set", "webhook.replicas=3", "--set", "webhook.failurePolicy.validating=Ignore",
                          "--set", "logLevel=debug", "--set", "excludedNamespaces={legacy}")
    assert "deployment.apps/tls-injector configured" in lines, lines
    assert "validatingwebhookconfiguration.admissionregistration.k8s.io/tls-injector configured" in lines, lines
    assert _state(emu) == before, "the upgrade's apply changed a Secret or a caBundle"
    assert release.run_hook() == 0
    assert _state(emu) == before, "the post-upgrade hook changed a Secret or a caBundle"
    validating = emu.get("validatingwebhookconfigurations", "tls-injector") or {}
    assert {hook["failurePolicy"] for hook in validating["webhooks"]} == {"Ignore"}
    assert (emu.get("deployments.apps", "tls-injector", NS) or {})["spec"]["replicas"] == 3
    with serving(emu, tmp_path) as address:
        for name, ns in (("web", "shop"), ("api", "plain")):
            admit(emu, address, pod_of(emu, name, ns))
        code, out = doctor(emu, address, capsys)
    assert code == 0, out
