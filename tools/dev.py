"""Set up the project's virtual environment, then run the server or the whole check suite.

Kept to the standard library so it runs on a fresh clone with nothing but Python 3.11:

    python3.11 tools/dev.py serve [serve flags...]   # the webhook server
    python3.11 tools/dev.py test [pytest args...]    # lint + types + import contracts + tests
    python3.11 tools/dev.py bench [bench args...]    # benchmarks (see README.md, "Benchmarks")

The environment lives in .venv and is reinstalled only when pyproject.toml or requirements.lock changes.
The runtime dependencies are installed at the versions requirements.lock pins, the ones the image
gets, so the suite tests what ships.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".installed-from"


LOCK = ROOT / "requirements.lock"


def _fingerprint() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + LOCK.read_bytes()).hexdigest()


def _constraints() -> Path:
    """requirements.lock without its hashes: pip treats any hash as "hash everything", which an editable
    install cannot satisfy, so the versions alone constrain the environment."""
    pins = [line.split()[0] for line in LOCK.read_text().splitlines() if "==" in line and not line.startswith("#")]
    path = VENV / "constraints.txt"
    path.write_text("\n".join(pins) + "\n")
    return path


def ensure_venv() -> None:
    if not (BIN / "python").exists():
        print("creating .venv", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    if STAMP.exists() and STAMP.read_text() == _fingerprint():
        return
    print("installing tls-injector and its dev dependencies into .venv", file=sys.stderr)
    pip = [str(BIN / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-e", f"{ROOT}[dev]", "-c", str(_constraints())], check=True)
    STAMP.write_text(_fingerprint())


# What the tests run besides Python: Debian's chromium (the status page's browser test), prometheus
# (promtool, for the alert rules' unit tests), npm (the chart tests fetch helm from the npm registry) and
# openssl (its s_client is the client that asks for a TLS renegotiation in the conformance table).
# Installed through apt when missing and this is root (as in CI); otherwise the tests that need them fail
# and say how to get them.
SYSTEM_TOOLS = {"chromium": "chromium", "promtool": "prometheus", "npm": "npm", "openssl": "openssl"}


def ensure_system_tools() -> None:
    missing = sorted({package for tool, package in SYSTEM_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    apt = shutil.which("apt-get")
    if os.name != "posix" or os.geteuid() != 0 or apt is None:
        print(f"not installed: {', '.join(missing)} (Debian packages; the tests that need them will fail)",
              file=sys.stderr)
        return
    print(f"installing {', '.join(missing)} with apt-get", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([apt, "update", "-qq"], check=True, env=env)
    subprocess.run([apt, "install", "-y", "-qq", *missing], check=True, env=env)


def ensure_control_plane() -> None:
    """The cluster tier's kube-apiserver, kube-controller-manager, kubectl and etcd, built from their Go
    modules when missing (tools/kube.py: cached by release outside the checkout, so only a new machine or
    a new pinned release pays for it). A build that fails stops here, with Go's error: the cluster tier
    is part of the suite, and a suite without it would prove less than it says."""
    import kube  # noqa: PLC0415 - tools/kube.py, beside this file (the script's folder is on sys.path)

    if not kube.built():
        print(f"building Kubernetes v{kube.KUBERNETES} from its Go modules (first time on this machine)",
              file=sys.stderr, flush=True)
    kube.build()


def run(*argv: str) -> int:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


def test(extra: list[str]) -> int:
    py = str(BIN / "python")
    steps: list[tuple[str, ...]] = [
        (py, "-m", "ruff", "check", "app", "tests", "bench", "tools"),
        (py, "-m", "mypy"),
        (str(BIN / "lint-imports"),),
    ]
    failed = [step[2] if len(step) > 2 else "lint-imports" for step in steps if run(*step) != 0]
    code = run(py, "-m", "pytest", *extra)
    if failed:
        print(f"failed checks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return code


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test", "bench"}:
        print(__doc__, file=sys.stderr)
        return 2
    ensure_venv()
    command, rest = argv[0], argv[1:]
    if command == "test":
        ensure_system_tools()
        ensure_control_plane()
        return test(rest)
    if command == "bench":
        return run(str(BIN / "python"), "-m", "bench", *rest)
    os.execv(str(BIN / "tls-injector"), [str(BIN / "tls-injector"), "serve", *rest])  # noqa: S606
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
