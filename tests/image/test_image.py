"""The image, built from the Dockerfile as a user builds it, checked from its OCI archive and run by runc.

tools/image.py builds it with buildah (Debian's) from the Dockerfile as it is. One difference from a
user's build, and only one: the base. The pinned python:3.11-slim-bookworm image cannot be pulled here,
so the build's PYTHON_IMAGE is a Debian bookworm root filesystem made by debootstrap with Debian's
CPython 3.11, and PYTHON_PREFIX=/usr says where that interpreter lives (docs/install.md, "The image,
built here"). Everything after FROM runs as written: the hash-locked installs from PyPI, the wheel,
tools/rootfs.sh, the `scratch` stage.

What is checked, from the archive itself (its JSON and layer tars, digests verified): the name the
manifests use, the numeric non-root user, no shell and no pip anywhere, no setuid file, the CA bundle
the base's and not the build machine's; then with runc, as Kubernetes' restricted profile runs a pod
(read-only root, every capability dropped, no new privileges, the image's user): `--version` prints
pyproject's version, pip cannot be imported, the root is really read-only, and `serve` answers a TLS
request to /readyz over loopback with its certificate from a read-only mount and nothing writable at
all, or, self-signed, with only the directory it writes its CA to writable.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import ssl
import stat
import tarfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.image.oci import Image, Mount, Runtime, bundle, image_tool, read
from tests.shipping.support import ROOT
from tests.support.certs import write_serving_pair

# The first build on a machine (debootstrap, then the build's PyPI installs) took ~10 min on 2 busy
# cores (docs/install.md); each step of tools/image.py has its own bound below this one.
pytestmark = pytest.mark.timeout(3600)
USER = "65532:65532"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox"}
VENV_PYTHON = "/opt/tls-injector/bin/python"
# A server answers its first /readyz in 3-5 s on 2 idle cores (it imports the web stack and, self-signed,
# makes a CA); a busy CI machine is slower. Past this it is not coming up.
READY_SECONDS = 90.0


@pytest.fixture(scope="module")
def built() -> Path:
    assert os.geteuid() == 0, "buildah, debootstrap and runc run as root here (developers' machines and CI)"
    return Path(image_tool().build())


@pytest.fixture(scope="module")
def image(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Image:
    return read(built, tmp_path_factory.mktemp("image") / "rootfs")


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    return Runtime(tmp_path_factory.mktemp("runc-state"))


@pytest.fixture(scope="module")
def tree(image: Image) -> Path:
    return image.rootfs


def run(image: Image, tree: Path, runtime: Runtime, where: Path, *args: str,
        mounts: tuple[Mount, ...] = ()) -> tuple[int, str, str]:
    done = runtime.run(bundle(image, tree, where, list(args), mounts))
    return done.returncode, done.stdout, done.stderr


def test_the_archive_names_the_image_as_the_manifests_do(image: Image) -> None:
    deployment = yaml.safe_load((ROOT / "manifests/base/deployment.yaml").read_text())
    named = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert named == f"tls-injector:{VERSION}"
    # A kubelet (and containerd) resolve a bare name to docker.io/library/<name>.
    annotations = image.index["manifests"][0]["annotations"]
    assert annotations["io.containerd.image.name"] == f"docker.io/library/{named}"
    assert annotations["org.opencontainers.image.ref.name"] == f"docker.io/library/{named}"
    assert image.archive.name == f"tls-injector-{VERSION}.oci.tar"
    assert image_tool().archive_path() == image.archive, "`tools/image.py path` names this archive"


def test_the_config_runs_the_console_script_as_the_numeric_non_root_user(image: Image) -> None:
    config = image.run_config()
    assert config["User"] == USER
    assert config["Entrypoint"] == ["tls-injector"]
    assert config["Cmd"] == ["serve"]
    assert "PATH=/opt/tls-injector/bin" in config["Env"]
    assert set(config["ExposedPorts"]) == {"8443/tcp", "8080/tcp"}
    assert image.config["os"] == "linux"
    assert image.config["architecture"] == "amd64"


def test_no_shell_no_pip_no_setuid_file_anywhere_in_the_image(image: Image, tree: Path) -> None:
    names = [Path(m.name) for m in image.layers]
    assert len(names) > 1000, "the layers hold the interpreter and the virtualenv"
    assert not {n.name for n in names} & SHELLS
    pips = [n for n in names if n.name in ("pip", "pip3", "pip3.11") or n.name.startswith(("pip-", "pip.", "pip3."))]
    assert not pips, pips[:5]
    assert not [m.name for m in image.layers if m.mode & (stat.S_ISUID | stat.S_ISGID)]
    # No build backend either (the Dockerfile says none ships): `python -m venv` puts setuptools in the venv.
    backends = {"setuptools", "pkg_resources", "_distutils_hack", "wheel", "distutils-precedence.pth"}
    assert not [n for n in names if n.name in backends or n.name.startswith(("setuptools-", "wheel-"))]
    # The only programs: the interpreter (and the loader it names) and the venv's entry points.
    executables = sorted(n.as_posix() for n, m in zip(names, image.layers, strict=True)
                         if m.isfile() and m.mode & 0o111 and n.parts[0] in ("bin", "sbin", "usr"))
    assert [e for e in executables if "/bin/" in f"/{e}" or "/sbin/" in f"/{e}"] == ["usr/bin/python3.11"]
    assert not (tree / "bin").exists()
    assert not (tree / "sbin").exists()


def test_the_ca_bundle_is_the_bases_debian_one_not_the_build_machines(image: Image, tree: Path) -> None:
    """The build reached PyPI with this machine's pip CA file mounted in; none of it reaches the image."""
    base = image_tool().base_dir() / "base.tar"
    with tarfile.open(base) as tar:
        member = tar.extractfile("./etc/ssl/certs/ca-certificates.crt")
        assert member is not None
        expected = member.read()
    shipped = (tree / "etc/ssl/certs/ca-certificates.crt").read_bytes()
    assert shipped == expected
    assert not (tree / "etc/pip.conf").exists()
    assert not (tree / "run").exists()


def test_version_run_in_the_image_by_runc_prints_pyprojects(image: Image, tree: Path, runtime: Runtime,
                                                            tmp_path: Path) -> None:
    code, out, err = run(image, tree, runtime, tmp_path / "version", *image.run_config()["Entrypoint"], "--version")
    assert code == 0, err
    assert out == f"tls-injector {VERSION}\n"


def test_in_the_container_pip_is_gone_and_the_root_is_read_only(image: Image, tree: Path, runtime: Runtime,
                                                                tmp_path: Path) -> None:
    probe = ("import errno, importlib.util, os\n"
             "print(importlib.util.find_spec('pip') is None, os.getuid(), os.getgid())\n"
             "for path in ('/probe', '/tmp/probe', '/opt/tls-injector/probe'):\n"
             "    try:\n"
             "        open(path, 'w')\n"
             "    except OSError as e:\n"
             "        print(path, errno.errorcode[e.errno])\n")
    code, out, err = run(image, tree, runtime, tmp_path / "probe", VENV_PYTHON, "-c", probe)
    assert code == 0, err
    assert out.splitlines() == ["True 65532 65532", *(f"{p} {errno.errorcode[errno.EROFS]}"
                                                      for p in ("/probe", "/tmp/probe", "/opt/tls-injector/probe"))]


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _readyz(port: int, ca_file: Path, log: Path) -> dict[str, object]:
    """GET /readyz over TLS, the server's certificate verified against `ca_file` for localhost."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            context = ssl.create_default_context(cafile=str(ca_file))
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := tls.recv(65536):
                    answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            loaded: dict[str, object] = json.loads(body)
            return loaded
        except (OSError, ssl.SSLError):
            assert time.monotonic() < deadline, f"no TLS answer within {READY_SECONDS} s:\n{log.read_text()}"
            time.sleep(0.5)


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    files = write_serving_pair(tmp_path / "serving")
    for path in (files.cert_file, files.key_file, files.ca_file, files.cert_file.parent):
        os.chown(path, 65532, 65532)
    files.key_file.chmod(0o400)
    return files.cert_file.parent


def _deployment_args(port: int, probe_port: int) -> list[str]:
    """The webhook Deployment's container args as shipped, on ports of this test (the host's network)."""
    deployment = yaml.safe_load((ROOT / "manifests/base/deployment.yaml").read_text())
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--port=8443" in args
    assert "--probe-port=8081" in args
    kept = [a for a in args if not a.startswith(("--port=", "--probe-port="))]
    return [*kept, "--host", "127.0.0.1", f"--port={port}", f"--probe-port={probe_port}"]


def test_serve_with_the_deployments_args_on_a_read_only_root_with_nothing_writable(
        image: Image, tree: Path, runtime: Runtime, tmp_path: Path, cert_dir: Path) -> None:
    """The shipped Deployment's container: its args, the serving Secret and the trust bundle mounted
    read-only where it mounts them. No path is writable at all (not even /tmp), and it answers."""
    trust = tmp_path / "trust"
    trust.mkdir()
    (trust / "ca-bundle.crt").write_bytes((cert_dir / "ca.crt").read_bytes())
    port, probe_port = _port(), _port()
    where = bundle(image, tree, tmp_path / "serve", [*image.run_config()["Entrypoint"], *_deployment_args(
        port, probe_port)], (Mount(cert_dir, "/etc/tls-injector/serving"), Mount(trust, "/etc/tls-injector/trust")))
    log = tmp_path / "serve.log"
    with runtime.started(where, log) as process:
        ready = _readyz(port, cert_dir / "ca.crt", log)
        assert process.poll() is None
    assert ready["ready"] is True
    assert ready["certificate_loaded"] is True
    assert "Traceback" not in log.read_text(), log.read_text()


def test_serve_with_workers_needs_a_writable_tmp_and_says_so_on_a_read_only_root(
        image: Image, tree: Path, runtime: Runtime, tmp_path: Path, cert_dir: Path) -> None:
    """`--workers` above 1 keeps its workers' state in a temp directory: the one writable path the server
    needs (the manifests mount an emptyDir at /tmp). Without one it stops at once and says so."""
    port = _port()
    args = [*image.run_config()["Entrypoint"], "serve", "--host", "127.0.0.1", f"--port={port}", "--no-reconciler",
            "--workers", "2", "--tls-cert-file", "/etc/tls-injector/serving/tls.crt",
            "--tls-private-key-file", "/etc/tls-injector/serving/tls.key", "--drain-seconds", "1"]
    mounts = (Mount(cert_dir, "/etc/tls-injector/serving"),)
    code, _, err = run(image, tree, runtime, tmp_path / "no-tmp", *args, mounts=mounts)
    assert code == 2, err
    assert "a read-only root file system needs an emptyDir at /tmp" in err
    where = bundle(image, tree, tmp_path / "tmp", args, mounts, tmpfs=("/tmp",))
    log = tmp_path / "serve.log"
    with runtime.started(where, log) as process:
        ready = _readyz(port, cert_dir / "ca.crt", log)
        assert process.poll() is None
    assert ready["ready"] is True


def test_serve_self_signed_on_a_read_only_root_writes_only_its_ca_directory(
        image: Image, tree: Path, runtime: Runtime, tmp_path: Path) -> None:
    writable = tmp_path / "self-signed"
    writable.mkdir()
    os.chown(writable, 65532, 65532)
    port = _port()
    where = bundle(image, tree, tmp_path / "serve", [
        *image.run_config()["Entrypoint"], "serve", "--host", "127.0.0.1", "--port", str(port), "--no-reconciler",
        "--self-signed-dir", "/var/run/tls-injector/ca", "--drain-seconds", "1"],
        (Mount(writable, "/var/run/tls-injector", writable=True),))
    log = tmp_path / "serve.log"
    with runtime.started(where, log) as process:
        ready = _readyz(port, writable / "ca" / "ca.crt", log)
        assert process.poll() is None
    assert ready["ready"] is True
    assert sorted(p.name for p in (writable / "ca").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert "Traceback" not in log.read_text(), log.read_text()
