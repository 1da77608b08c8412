"""Build a real Kubernetes control plane from Go modules, for the cluster tier of the tests.

Kept to the standard library, like dev.py, so it runs on a fresh clone:

    python3.11 tools/kube.py build     # build when missing, print the folder of the binaries
    python3.11 tools/kube.py path      # print that folder, exit 1 when it is not built yet

What it builds, from the Go module proxy with the ordinary Go toolchain (no prebuilt binary is
downloaded): kube-apiserver, kube-controller-manager and kubectl of the pinned release, from the
`k8s.io/kubernetes` module, and etcd from `go.etcd.io/etcd/server/v3` at the version that release's
go.mod requires, behind a main of our own. `k8s.io/kubernetes` replaces its staging modules
(`k8s.io/api`, `k8s.io/apiserver`, ...) with folders of its own repository, which a module that
requires it cannot see, so our go.mod replaces each with the published `v0.<minor>.<patch>` of the
same release.

The binaries are cached outside the checkout, under $TLS_INJECTOR_KUBE_CACHE (default
~/.cache/tls-injector/kube), in a folder named by the release: changing KUBERNETES below builds
anew, anything else reuses it. A first build on 2 cores takes the time docs/cluster-tests.md gives.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

KUBERNETES = "1.37.2"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kubectl", "etcd")
# The staging folders of k8s.io/kubernetes' go.mod: "k8s.io/api => ./staging/src/k8s.io/api".
_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", re.M)
_ETCD = re.compile(r"^\s*go\.etcd\.io/etcd/server/v3\s+(v[\w.-]+)", re.M)


def cache_root() -> Path:
    configured = os.environ.get("TLS_INJECTOR_KUBE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "tls-injector" / "kube"


def bin_dir() -> Path:
    return cache_root() / f"v{KUBERNETES}" / "bin"


def built() -> bool:
    return all((bin_dir() / name).is_file() for name in BINARIES)


def _go(*argv: str, cwd: Path, env: dict[str, str]) -> str:
    print("+ go " + " ".join(argv), file=sys.stderr, flush=True)
    # Go's own installer puts it in /usr/local/go/bin, which a non-login shell's PATH may lack.
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if go is None:
        raise SystemExit("go is not installed: the cluster tier builds Kubernetes from its Go modules")
    done = subprocess.run([go, *argv], cwd=cwd, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return done.stdout


def _kubernetes_gomod(src: Path, env: dict[str, str]) -> str:
    out = _go("mod", "download", "-json", f"k8s.io/kubernetes@v{KUBERNETES}", cwd=src, env=env)
    path = re.search(r'"GoMod":\s*"([^"]+)"', out)
    if path is None:
        raise SystemExit(f"go mod download printed no go.mod for k8s.io/kubernetes@v{KUBERNETES}")
    return Path(path.group(1)).read_text()


def _write_module(src: Path, gomod: str) -> None:
    """Our go.mod: require the release, replace each staging module with its published twin."""
    staging = sorted(set(_STAGING.findall(gomod)))
    etcd = _ETCD.search(gomod)
    if not staging or etcd is None:
        raise SystemExit("k8s.io/kubernetes' go.mod names no staging modules or no etcd server version")
    minor_patch = KUBERNETES.split(".", 1)[1]
    replaces = "\n".join(f"\t{name} => {name} v0.{minor_patch}" for name in staging)
    (src / "go.mod").write_text(
        "module tls-injector.test/kube\n\ngo 1.26.0\n\n"
        f"require (\n\tk8s.io/kubernetes v{KUBERNETES}\n\tgo.etcd.io/etcd/server/v3 {etcd.group(1)}\n)\n\n"
        f"replace (\n{replaces}\n)\n")
    etcd_main = src / "cmd" / "etcd"
    etcd_main.mkdir(parents=True, exist_ok=True)
    (etcd_main / "main.go").write_text(
        'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
        "func main() { etcdmain.Main(os.Args) }\n")


def _ldflags() -> str:
    """The version the binaries report: helm and kubectl read it (a chart's kubeVersion, skew)."""
    major, minor, _ = KUBERNETES.split(".")
    values = {"gitVersion": f"v{KUBERNETES}", "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z"}
    sets = [f"-X {pkg}.{key}={value}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
            for key, value in values.items()]
    return " ".join(["-s", "-w", *sets])


def build() -> Path:
    if built():
        return bin_dir()
    src = cache_root() / f"v{KUBERNETES}" / "src"
    src.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    _write_module(src, _kubernetes_gomod(src, env))
    out = bin_dir().with_name("bin.partial")
    out.mkdir(parents=True, exist_ok=True)
    _go("build", "-trimpath", "-ldflags", _ldflags(), "-o", str(out) + "/",
        "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kubectl", "./cmd/etcd", cwd=src, env=env)
    shutil.rmtree(bin_dir(), ignore_errors=True)
    out.rename(bin_dir())
    return bin_dir()


def command(argv: list[str], *, build: Callable[[], Path], bin_dir: Callable[[], Path],
            built: Callable[[], bool], usage: str | None) -> int:
    """`build` (when missing; print the folder) or `path` (print it; exit 1 when not built yet): the command
    line of this script and of the other tool builders beside it (node.py, release_tools.py)."""
    if argv == ["build"]:
        print(build())
        return 0
    if argv == ["path"]:
        print(bin_dir())
        return 0 if built() else 1
    print(usage, file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    return command(argv, build=build, bin_dir=bin_dir, built=built, usage=__doc__)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
