"""The release's tools, built from their Go modules, for the registry test of docs/release.md.

Kept to the standard library, like dev.py and kube.py, so it runs on a fresh clone:

    python3.11 tools/release_tools.py build     # build what is missing, print the folder of the binaries
    python3.11 tools/release_tools.py path      # print that folder, exit 1 when one is not built yet

What it builds, each with `go install -trimpath -ldflags='-s -w' <package>@<version>` from the Go module
proxy (the module's own go.mod and go.sum decide every dependency; no prebuilt binary is downloaded):

- registry: the distribution registry (CNCF Distribution), the registry a release is pushed to in the
  suite, on loopback;
- cosign: signs and verifies the image and the chart, with a key pair (no transparency log is reachable);
- syft: writes the SBOMs (SPDX) of the wheel and of the image.

Cached outside the checkout, under $TLS_INJECTOR_RELEASE_TOOLS_CACHE (default
~/.cache/tls-injector/release-tools), one folder per tool and version: changing a version below builds
that tool anew, anything else reuses it. Build times on 2 busy cores: docs/release.md.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import kube  # tools/kube.py, beside this file: its command line

# name: (package, version). The version is the module's; `go install` takes the module's go.sum.
TOOLS: dict[str, tuple[str, str]] = {
    "registry": ("github.com/distribution/distribution/v3/cmd/registry", "v3.1.2"),
    "cosign": ("github.com/sigstore/cosign/v2/cmd/cosign", "v2.6.5"),
    "syft": ("github.com/anchore/syft/cmd/syft", "v1.57.2"),
}
# One build of the three on 2 busy cores is minutes (docs/release.md); past this something is stuck.
BUILD_SECONDS = 3600
LOCK_SECONDS = 3 * 3600


def cache_root() -> Path:
    configured = os.environ.get("TLS_INJECTOR_RELEASE_TOOLS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "tls-injector" / "release-tools"


def binary(name: str) -> Path:
    """Where the tool `name` of its pinned version is (or will be) built."""
    _, version = TOOLS[name]
    return cache_root() / f"{name}-{version}" / name


def bin_dir() -> Path:
    """A folder holding exactly the pinned builds (links), for a PATH."""
    return cache_root() / "bin"


def built() -> bool:
    return all(binary(name).is_file() for name in TOOLS) and all(
        (bin_dir() / name).resolve() == binary(name) for name in TOOLS)


def _go() -> str:
    # Go's own installer puts it in /usr/local/go/bin, which a non-login shell's PATH may lack.
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if go is None:
        raise SystemExit("go is not installed: the release test builds its registry, cosign and syft with it")
    return go


def _build_one(name: str) -> float:
    """`go install` the tool into a partial folder, then rename it into place; the seconds it took."""
    package, version = TOOLS[name]
    final = binary(name).parent
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    env = {**os.environ, "GOBIN": str(partial), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    argv = [_go(), "install", "-trimpath", "-ldflags=-s -w", f"{package}@{version}"]
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    started = time.monotonic()
    subprocess.run(argv, env=env, check=True, timeout=BUILD_SECONDS, cwd=cache_root())
    took = time.monotonic() - started
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    print(f"built {name} {version} in {took:.0f} s", file=sys.stderr, flush=True)
    return took


def build() -> Path:
    """Build each missing tool (one at a time: the machine's cores are shared), link them into bin_dir()."""
    if built():
        return bin_dir()
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / "lock").open("w") as lock:
        deadline = time.monotonic() + LOCK_SECONDS
        while True:  # another checkout on this machine may be building the same tools: wait for it
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{cache_root()}/lock held for over {LOCK_SECONDS} s") from None
                time.sleep(5)
        for name in TOOLS:
            if not binary(name).is_file():
                _build_one(name)
        bin_dir().mkdir(exist_ok=True)
        for name in TOOLS:
            link = bin_dir() / name
            link.unlink(missing_ok=True)
            link.symlink_to(binary(name))
    return bin_dir()


def main(argv: list[str]) -> int:
    return kube.command(argv, build=build, bin_dir=bin_dir, built=built, usage=__doc__)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
