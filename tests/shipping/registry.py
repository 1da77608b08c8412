"""A container registry of the suite's own, on loopback, for the release steps of docs/release.md.

The registry is the distribution registry (CNCF Distribution) built from its Go module by
tools/release_tools.py, with cosign (signatures, attestations) and syft (SBOMs) beside it. It listens
on 127.0.0.1 on a free port over TLS, with a CA the test makes: every client (skopeo, helm, cosign,
syft) then talks to it as to a real registry, with no insecure-registry or plain-HTTP flag, so the
documented commands run exactly as a release manager runs them. They find the CA through
SSL_CERT_FILE, which Go's TLS reads for the system roots (`client_env`).

Every wait is bounded (START_SECONDS, STOP_SECONDS), and the process is stopped, killed if need be,
when the fixture ends, whatever the test did.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.shipping.support import ROOT

# The registry answers /v2/ in well under a second on an idle machine; 2 busy cores take longer.
START_SECONDS = 60.0
STOP_SECONDS = 20.0


def release_tools() -> Any:
    """tools/release_tools.py (the tools are built once per machine by tools/dev.py test)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import release_tools
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return release_tools


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT
    pid: int
    ca: Path  # the CA that signed its serving certificate
    storage: Path
    log: Path

    def get(self, path: str, accept: str = "") -> tuple[int, dict[str, str], bytes]:
        """One GET of the registry API (e.g. /v2/), trusting only the test's CA."""
        context = ssl.create_default_context(cafile=str(self.ca))
        request = urllib.request.Request(f"https://{self.host}{path}", headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, dict(response.headers), response.read()


def _openssl(*argv: str, cwd: Path) -> None:
    subprocess.run(["openssl", *argv], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_tls(into: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 signed by it (EC P-256, one day)."""
    into.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
             "-subj", "/CN=tls-injector test registry CA", "-keyout", "ca.key", "-out", "ca.crt",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=into)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "tls.key", "-out", "tls.csr", cwd=into)
    (into / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
                                  "basicConstraints=critical,CA:FALSE\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
             "-extfile", "ext.cnf", "-out", "tls.crt", cwd=into)
    return into / "ca.crt", into / "tls.crt", into / "tls.key"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(root: Path, port: int, cert: Path, key: Path) -> Path:
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'storage'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: tls-injector-test\n"
        f"  tls:\n    certificate: {cert}\n    key: {key}\n")
    return config


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)


@contextmanager
def running(root: Path, port: int = 0, wrap: Sequence[str] = ()) -> Iterator[Registry]:
    """The registry on `port` of 127.0.0.1 (0: a free one), storage under `root`; stopped on the way out.

    `wrap` prefixes its command: the node tier runs it inside the node's network namespace (where the
    node's containerd reaches it) and relays the same port of the host's loopback to it first, so the
    readiness check below and the release's clients reach it at the same address."""
    ca, cert, key = make_tls(root / "tls")
    binary = release_tools().binary("registry")
    assert binary.is_file(), f"{binary} is not built: python3.11 tools/release_tools.py build (tools/dev.py test does)"
    port = port or _free_port()
    log = root / "registry.log"
    # Its tracing exporter would try a collector on localhost: none here.
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "true"}
    with log.open("wb") as out:
        process = subprocess.Popen([*wrap, str(binary), "serve", str(_config(root, port, cert, key))], stdout=out,
                                   stderr=subprocess.STDOUT, env=env)
    registry = Registry(f"127.0.0.1:{port}", process.pid, ca, root / "storage", log)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert process.poll() is None, f"the registry exited {process.returncode}:\n{log.read_text()[-3000:]}"
            try:
                if registry.get("/v2/")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no answer on {registry.host} in {START_SECONDS} s:\n{log.read_text()}"
            time.sleep(0.2)
        yield registry
    finally:
        _stop(process)


def client_env(registry: Registry, home: Path) -> dict[str, str]:
    """What the release's clients run with: the CA as their only roots, and every config and cache they
    write (helm's, cosign's TUF cache, the containers auth file) under `home`, not the user's."""
    return {"SSL_CERT_FILE": str(registry.ca), "HOME": str(home), "DOCKER_CONFIG": str(home / ".docker"),
            "REGISTRY_AUTH_FILE": str(home / "auth.json"), "HELM_CACHE_HOME": str(home / "helm-cache"),
            "HELM_CONFIG_HOME": str(home / "helm-config"), "HELM_DATA_HOME": str(home / "helm-data"),
            "TUF_ROOT": str(home / "sigstore"), "SYFT_CHECK_FOR_APP_UPDATE": "false",
            "XDG_CACHE_HOME": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config")}
