"""Build the image from the Dockerfile, as a user builds it, with buildah; for the tests and the node tier.

Kept to the standard library, like dev.py and kube.py, so it runs on a fresh clone:

    python3.11 tools/image.py build     # build when missing, print the path of the image's OCI archive
    python3.11 tools/image.py path      # print that path, exit 1 when it is not built yet

The archive is an OCI image layout in one tar (`oci-archive`), its one image named as the manifests name
it, `tls-injector:<version of pyproject.toml>` in its full form docker.io/library/tls-injector:<version>
(the index's `org.opencontainers.image.ref.name` and containerd's `io.containerd.image.name`), so
`ctr -n k8s.io images import` of it gives the kubelet the image the manifests ask for.

How it is built: `buildah build` (Debian's buildah; it ignores the Dockerfile's `# syntax=` line, which
would make BuildKit fetch a frontend image) of the Dockerfile as it is, RUN steps in runc, on the host's
network (they install from PyPI; nothing on the host is changed, no bridge or firewall rule is made).
One difference from a user's build: the base. The pinned python:3.11-slim-bookworm image cannot be
pulled here (no registry but the package registries is reachable), so a base is made here: a Debian
bookworm root filesystem by debootstrap from the Debian mirror this machine's apt uses, with Debian's
CPython 3.11 (python3, python3-venv, python3-pip, python-is-python3) and ca-certificates, passed
through the Dockerfile's PYTHON_IMAGE build argument, with PYTHON_PREFIX=/usr (Debian's interpreter
lives in /usr/bin, the python image's in /usr/local/bin). Debian marks its interpreter "externally
managed" (PEP 668); the base drops that marker, as the python image has none, so the Dockerfile's
`python -m pip install` runs as written.

What the builder gets from this machine, never into the image: the proxy variables (HTTP_PROXY,
HTTPS_PROXY, NO_PROXY, ALL_PROXY; Docker's predefined build arguments) when set, and pip's settings
for reaching PyPI (its CA file, `cert`, and index-url, extra-index-url, trusted-host from PIP_* or
pip.conf), as a pip.conf bind-mounted at /etc/pip.conf in the RUN steps with the CA file beside it.
tools/rootfs.sh copies neither into the image: its CA bundle is the base's Debian ca-certificates.

Cached outside the checkout, under $TLS_INJECTOR_IMAGE_CACHE (default ~/.cache/tls-injector/image):
base/<release>-<recipe>/ holds the base's root filesystem as a tar (base.json: its Debian and Python
versions), storage/ buildah's own storage (never /var/lib/containers), images/<key>/ the archive,
keyed by a hash of the build's inputs (the Dockerfile, app/, pyproject.toml, README.md, the locks,
tools/rootfs.sh, the base and the build arguments): an unchanged tree reuses the archive, a change to
app/ alone reuses the dependency layer. A lock file lets two builds on one machine wait for each other.
First build and cached times: docs/install.md ("The image, built here").
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "tls-injector"
RELEASE = "bookworm"
# What `python -m venv` and `python -m pip` need on Debian's CPython 3.11, and the CA bundle the image
# copies. Change the list or BASE_RECIPE and the base (and so every image) is made anew.
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates")
BASE_RECIPE = "1"
PYTHON_PREFIX = "/usr"
# The build context the Dockerfile copies (.dockerignore lets exactly these in) and the Dockerfile.
INPUTS = ("Dockerfile", ".dockerignore", "README.md", "pyproject.toml", "requirements.lock",
          "requirements-build.lock", "tools/rootfs.sh", "app", "tools/image.py")  # and how it is built
# Every wait is bounded. Measured on 2 busy cores: debootstrap ~4 min, the build ~5 min (docs/install.md).
DEBOOTSTRAP_SECONDS = 1800
BUILD_SECONDS = 2400
STEP_SECONDS = 600
LOCK_SECONDS = 3600
# buildah's storage keeps each build's layers (a change to app/ reuses the dependency layer); past this
# size the images no archive needs are removed.
STORAGE_PRUNE_BYTES = 6 << 30
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")
PIP_SETTINGS = ("index-url", "extra-index-url", "trusted-host")
SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_root() -> Path:
    configured = os.environ.get("TLS_INJECTOR_IMAGE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "tls-injector" / "image"


def version() -> str:
    found = re.search(r'(?m)^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text())
    if found is None:
        raise SystemExit("pyproject.toml: no [project] version line")
    return found[1]


def reference() -> str:
    """The image's name in full, as a kubelet resolves the manifests' `tls-injector:<version>`."""
    return f"docker.io/library/{NAME}:{version()}"


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=SBIN)
    if found is None:
        raise SystemExit(f"{name} is not installed: the image build needs Debian's buildah and debootstrap "
                         "(tools/dev.py test installs them)")
    return found


def _run(argv: list[str], *, timeout: float, capture: bool = False, quiet: bool = False) -> str:
    """`argv` to its end within `timeout`; past it the whole process group is killed (buildah's runc and
    the RUN step's processes with it), so nothing of a stuck build is left running."""
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    with subprocess.Popen(argv, text=True, stdout=subprocess.PIPE if capture else sys.stderr,
                          stderr=subprocess.DEVNULL if quiet else None, start_new_session=True) as process:
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=60)
            raise
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv, out)
    return out or ""


# ---- the base: Debian bookworm with Debian's CPython 3.11 -------------------------------------------

def mirror() -> str:
    """The Debian mirror this machine's apt uses for the release (its sources), else deb.debian.org."""
    configured = os.environ.get("TLS_INJECTOR_DEBIAN_MIRROR")
    if configured:
        return configured
    sources = Path("/etc/apt")
    for path in sorted([sources / "sources.list", *sources.glob("sources.list.d/*")]):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for stanza in re.split(r"\n\s*\n", text):  # deb822: URIs and Suites in one stanza
            uris = re.search(r"(?mi)^URIs:\s*(\S+)", stanza)
            suites = re.search(r"(?mi)^Suites:\s*(.+)$", stanza)
            if uris and suites and RELEASE in suites[1].split() and uris[1].rstrip("/").endswith("/debian"):
                return uris[1]
        for line in text.splitlines():  # one-line: deb URI SUITE COMPONENTS
            words = line.split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == RELEASE and words[1].rstrip("/").endswith(
                    "/debian"):
                return words[1]
    return "http://deb.debian.org/debian"


def base_dir() -> Path:
    recipe = hashlib.sha256(" ".join([RELEASE, BASE_RECIPE, *BASE_PACKAGES]).encode()).hexdigest()[:12]
    return cache_root() / "base" / f"{RELEASE}-{recipe}"


def _dpkg_versions(rootfs: Path, packages: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for stanza in (rootfs / "var/lib/dpkg/status").read_text().split("\n\n"):
        name = re.search(r"(?m)^Package: (\S+)", stanza)
        number = re.search(r"(?m)^Version: (\S+)", stanza)
        if name and number and name[1] in packages:
            found[name[1]] = number[1]
    return found


def base() -> dict[str, str]:
    """The base's record (base.json), made when missing: debootstrap, then its tree as one tar."""
    folder = base_dir()
    record = folder / "base.json"
    if record.is_file() and (folder / "base.tar").is_file():
        loaded: dict[str, str] = json.loads(record.read_text())
        return loaded
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rootfs = folder / "rootfs"
    started = time.monotonic()
    _run([_tool("debootstrap"), "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", RELEASE, str(rootfs),
          mirror()], timeout=DEBOOTSTRAP_SECONDS)
    # The python image's interpreter has no PEP 668 marker; Debian's has. Without it the Dockerfile's
    # `python -m pip install` of the build backend runs as written (into /usr/local, as there).
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    info = {"release": RELEASE, "debian": (rootfs / "etc/debian_version").read_text().strip(),
            **_dpkg_versions(rootfs, ("python3.11", "ca-certificates")), "mirror": mirror()}
    partial = folder / "base.tar.partial"
    _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "--exclude=./dev/*",
          "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./run/*", "--exclude=./tmp/*", "."],
         timeout=STEP_SECONDS)
    digest = hashlib.sha256()
    with partial.open("rb") as tar:
        while chunk := tar.read(1 << 20):
            digest.update(chunk)
    info["digest"] = digest.hexdigest()
    info["seconds"] = f"{time.monotonic() - started:.0f}"
    partial.rename(folder / "base.tar")
    shutil.rmtree(rootfs)
    record.write_text(json.dumps(info, indent=1) + "\n")
    return info


def base_image(info: dict[str, str]) -> str:
    return f"localhost/{NAME}-base:{RELEASE}-{info['debian']}-{info['digest'][:12]}"


# ---- buildah, with storage of its own ----------------------------------------------------------------

def _buildah(*argv: str, timeout: float = STEP_SECONDS, capture: bool = False, quiet: bool = False) -> str:
    root = cache_root()
    return _run([_tool("buildah"), "--root", str(root / "storage"), "--runroot", str(root / "run"),
                 "--storage-driver", "overlay", *argv], timeout=timeout, capture=capture, quiet=quiet)


def _has_image(name: str) -> bool:
    try:
        _buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", name, capture=True, quiet=True)
    except subprocess.CalledProcessError:
        return False
    return True


def _import_base(info: dict[str, str]) -> str:
    name = base_image(info)
    if _has_image(name):
        return name
    container = _buildah("from", "--pull=never", "scratch", capture=True).strip()
    try:
        _buildah("add", container, str(base_dir() / "base.tar"), "/")
        _buildah("config", "--env", f"PATH={SBIN}", "--cmd", "python3", "--label",
                 f"debian={info['debian']}", "--label", f"python3.11={info.get('python3.11', '')}", container)
        _buildah("commit", "--quiet", container, name, capture=True)
    finally:
        _buildah("rm", container, capture=True)
    return name


def _pip_settings() -> tuple[dict[str, str], Path | None]:
    """What this machine's pip uses to reach PyPI: index settings and the CA file (PIP_* first, then the
    pip.conf files pip reads, the last one winning as in pip)."""
    settings: dict[str, str] = {}
    files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), Path.home() / ".pip/pip.conf",
             Path.home() / ".config/pip/pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    for path in files:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except (configparser.Error, OSError):
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for key in (*PIP_SETTINGS, "cert"):
                    if parser.has_option(section, key):
                        settings[key] = parser.get(section, key)
    for key in (*PIP_SETTINGS, "cert"):
        value = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if value:
            settings[key] = value
    cert = settings.pop("cert", None)
    return settings, Path(cert) if cert and Path(cert).is_file() else None


def _build_environment(work: Path) -> list[str]:
    """The build arguments and mounts that carry this machine's way to PyPI into the RUN steps."""
    options: list[str] = []
    for name in PROXY_VARIABLES:
        for spelled in (name, name.lower()):
            if os.environ.get(spelled):
                options += ["--build-arg", f"{spelled}={os.environ[spelled]}"]
    settings, cert = _pip_settings()
    lines = ["[global]", *(f"{key} = {value}" for key, value in settings.items())]
    if cert is not None:
        shutil.copyfile(cert, work / "ca.crt")
        lines.append("cert = /run/tls-injector-build/ca.crt")
        options += ["--volume", f"{work / 'ca.crt'}:/run/tls-injector-build/ca.crt:ro"]
    (work / "pip.conf").write_text("\n".join(lines) + "\n")
    options += ["--volume", f"{work / 'pip.conf'}:/etc/pip.conf:ro"]
    return options


# ---- the image -----------------------------------------------------------------------------------

def _inputs_digest(info: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name in INPUTS:
        path = ROOT / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if "__pycache__" in file.parts or file.suffix == ".pyc":
                continue  # .dockerignore keeps them out of the context
            digest.update(f"{relative}\0{file.stat().st_mode & 0o111:o}\0".encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    digest.update(f"{base_image(info)}\0{PYTHON_PREFIX}".encode())
    return digest.hexdigest()


def _archive_dir() -> Path | None:
    """Where this tree's archive is (or goes), when the base is known; None before the base is made."""
    record = base_dir() / "base.json"
    if not record.is_file():
        return None
    info = json.loads(record.read_text())
    return cache_root() / "images" / _inputs_digest(info)[:16]


def archive_path() -> Path | None:
    folder = _archive_dir()
    return None if folder is None else folder / f"{NAME}-{version()}.oci.tar"


def built() -> bool:
    path = archive_path()
    return path is not None and path.is_file()


def _oci_archive(layout: Path, out: Path) -> None:
    """The OCI layout as one tar, its manifest named for buildah, skopeo (ref.name) and containerd."""
    index = json.loads((layout / "index.json").read_text())
    for manifest in index["manifests"]:
        manifest.setdefault("annotations", {}).update({"org.opencontainers.image.ref.name": reference(),
                                                       "io.containerd.image.name": reference()})
    (layout / "index.json").write_text(json.dumps(index, separators=(",", ":")))
    with tarfile.open(out, "w") as tar:
        for path in sorted(layout.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(layout).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _prune(keep: str) -> None:
    images = cache_root() / "images"
    for folder in images.glob("*"):
        if folder.name != keep:
            shutil.rmtree(folder, ignore_errors=True)
    storage = cache_root() / "storage"
    if storage.is_dir() and _size(storage) > STORAGE_PRUNE_BYTES:
        _buildah("rmi", "--prune", capture=True)


def _build_locked() -> Path:
    started = time.monotonic()
    base_known = (base_dir() / "base.json").is_file()
    info = base()
    base_seconds = 0.0 if base_known else time.monotonic() - started
    folder = _archive_dir()
    assert folder is not None  # the base exists now
    out = folder / f"{NAME}-{version()}.oci.tar"
    if out.is_file():
        return out
    # Containers a killed build left behind (this storage is ours alone, and the lock is held).
    _buildah("rm", "--all", capture=True)
    name = _import_base(info)
    tag = f"localhost/{NAME}:{version()}"
    shutil.rmtree(folder, ignore_errors=True)
    work = folder / "work"
    work.mkdir(parents=True)
    building = time.monotonic()
    # runc named, not left to containers.conf: crun, its other choice, refuses this host's cgroups.
    _buildah("build", "--layers", "--pull=never", "--network", "host", "--isolation", "oci",
             "--runtime", _tool("runc"),
             "--build-arg", f"PYTHON_IMAGE={name}", "--build-arg", f"PYTHON_PREFIX={PYTHON_PREFIX}",
             *_build_environment(work), "--tag", tag, "--file", str(ROOT / "Dockerfile"), str(ROOT),
             timeout=BUILD_SECONDS)
    build_seconds = time.monotonic() - building
    layout = work / "layout"
    _buildah("push", "--quiet", tag, f"oci:{layout}:{reference()}")
    partial = out.with_name(out.name + ".partial")
    _oci_archive(layout, partial)
    record = {"reference": reference(), "base": name, "base_seconds": round(base_seconds),
              "build_seconds": round(build_seconds), "total_seconds": round(time.monotonic() - started),
              "archive_bytes": partial.stat().st_size}
    (folder / "build.json").write_text(json.dumps(record, indent=1) + "\n")
    shutil.rmtree(work)
    partial.rename(out)
    _prune(keep=folder.name)
    return out


def build() -> Path:
    """The archive's path, built first when missing; one build at a time on a machine (a lock file)."""
    if (path := archive_path()) is not None and path.is_file():
        return path
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / "lock").open("w") as lock:
        deadline = time.monotonic() + LOCK_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as busy:
                if time.monotonic() > deadline:
                    raise SystemExit(f"another image build held {cache_root() / 'lock'} for {LOCK_SECONDS} s") from busy
                time.sleep(2)
        return _build_locked()


def main(argv: list[str]) -> int:
    if argv == ["build"]:
        print(build())
        return 0
    if argv == ["path"]:
        path = archive_path()
        print(path if path is not None else cache_root() / "images")
        return 0 if built() else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
