"""The image's filesystem as tools/rootfs.sh assembles it (the Dockerfile's final stage is that tree on
`scratch`), built here from the interpreter and virtualenv this suite runs in: it holds no shell and no
pip, every runtime module loads in it, and the real server starts in it (chroot, as the image's numeric
user) and answers over TLS. No container runtime is needed; the Dockerfile tests check the image uses
the same script with the same paths."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.shipping.support import ROOT

# Assembling the tree links every file of the suite's virtualenv and runs ldd on every extension module:
# about a minute on a busy two-core machine, once for the module.
pytestmark = pytest.mark.timeout(600)
USER = "65532:65532"
VENV = Path(sys.prefix)
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "busybox", "ksh", "csh", "tcsh"}


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert os.geteuid() == 0, "chroot needs root (developers' machines and CI run as root)"
    dest = tmp_path_factory.mktemp("image") / "rootfs"
    subprocess.run([str(ROOT / "tools" / "rootfs.sh"), sys.base_prefix, str(VENV), str(dest)],
                   env={**os.environ, "ROOTFS_LINK": "1"}, check=True, timeout=600)
    # The suite's venv holds the package in editable form (a finder naming ROOT/app); the image holds
    # the wheel. Put the sources where the finder looks.
    (dest / ROOT.relative_to("/")).mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(ROOT / "app"), str(dest / ROOT.relative_to("/") / "app")], check=True)
    return dest


def in_image(rootfs: Path, *command: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROOT, f"--userspec={USER}", str(rootfs), *command], capture_output=True,
                          text=True, check=False, timeout=60, **kwargs)  # type: ignore[call-overload]


def test_the_tree_holds_no_shell_and_no_pip(rootfs: Path) -> None:
    names = {p.name for p in rootfs.rglob("*")}
    assert not names & SHELLS
    assert not {n for n in names if n == "pip" or n.startswith(("pip-", "pip3"))}
    assert not (rootfs / "bin").exists()
    assert not (rootfs / "usr" / "bin").exists()
    shell = subprocess.run([CHROOT, str(rootfs), "/bin/sh", "-c", "true"], capture_output=True, check=False)
    assert shell.returncode == 127  # chroot: the command does not exist
    pip = in_image(rootfs, str(VENV / "bin" / "python"), "-m", "pip", "--version")
    assert pip.returncode != 0
    assert "No module named pip" in pip.stderr


def test_every_runtime_module_loads_in_the_tree(rootfs: Path) -> None:
    modules = ("ssl", "ctypes", "uuid", "zoneinfo", "uvloop", "httptools", "orjson", "cryptography.x509",
               "cel_expr_python", "kubernetes", "yaml", "tls_injector.cli", "tls_injector.web.server",
               "tls_injector.reconcile.loop.runner")
    result = in_image(rootfs, str(VENV / "bin" / "python"), "-c", f"import {', '.join(modules)}; print('ok')")
    assert result.returncode == 0, result.stderr
    version = in_image(rootfs, str(VENV / "bin" / "tls-injector"), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("tls-injector ")


@pytest.fixture
def served(rootfs: Path) -> Iterator[tuple[int, Path]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [CHROOT, f"--userspec={USER}", str(rootfs), str(VENV / "bin" / "tls-injector"), "serve", "--host",
               "127.0.0.1", "--port", str(port), "--no-reconciler", "--self-signed-dir", "/tmp/self-signed"]
    # The image's environment: only its PATH.
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={"PATH": str(VENV / "bin")}) as process:
        try:
            yield port, rootfs / "tmp" / "self-signed" / "ca.crt"
        finally:
            process.terminate()
            _, errors = process.communicate(timeout=30)
            assert "Traceback" not in errors, errors


def test_the_server_starts_in_the_tree_as_the_images_user_and_answers_over_tls(served: tuple[int, Path]) -> None:
    port, ca_file = served
    deadline = time.monotonic() + 60
    status = None
    while status is None:
        assert time.monotonic() < deadline, "the server did not answer within 60 s"
        try:
            context = ssl.create_default_context(cafile=str(ca_file))
            with httpx.Client(verify=context, timeout=5) as client:
                status = client.get(f"https://localhost:{port}/healthz").status_code
        except (OSError, httpx.HTTPError):
            time.sleep(0.2)
    assert status == 200
