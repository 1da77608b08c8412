"""The project's version: one source, pyproject.toml's [project] version, and the copies that must follow it.

    python3.11 tools/release.py check               # every copy equals pyproject's version (exit 1 if not)
    python3.11 tools/release.py set-version 0.2.0   # write the new version into pyproject and every copy
    python3.11 tools/release.py pin-chart REPOSITORY DIGEST OUT
        # a copy of the chart in OUT/tls-injector whose default image is REPOSITORY@DIGEST (docs/release.md)

Why copies at all: the Helm chart's Chart.yaml (version, appVersion), the image tag the kustomize base
and certs-bootstrap run before an overlay pins a digest, the example chart values, the commands in
docs/install.md and the local tag docs/security.md names cannot read pyproject.toml. Each is listed here
with the pattern that finds it; the test suite (tests/shipping/test_release.py) runs `check`, and finds
any copy no pattern here writes. Kept to the standard library, like dev.py.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ("pyproject.toml", r'(?m)^version = "([^"]+)"$')
_VERSION = r"(\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.]+)?)"
# (file, pattern whose group 1 is a copy of the version): every match in the file is a copy.
COPIES: tuple[tuple[str, str], ...] = (
    ("charts/tls-injector/Chart.yaml", r"(?m)^version: (\S+)$"),
    ("charts/tls-injector/Chart.yaml", r'(?m)^appVersion: "([^"]+)"$'),
    ("charts/tls-injector/ci/example-values.yaml", r'(?m)^  tag: "([^"]+)"$'),
    ("manifests/base/deployment.yaml", rf"image: tls-injector:{_VERSION}"),
    ("manifests/base/reconciler.yaml", rf"image: tls-injector:{_VERSION}"),
    ("certs-bootstrap/job.yaml", rf"image: tls-injector:{_VERSION}"),
    ("docs/install.md", rf"/tls-injector:{_VERSION}"),
    ("docs/install.md", rf"charts/tls-injector\" --version {_VERSION}"),
    ("docs/security.md", rf"`tls-injector:{_VERSION}`"),
    ("manifests/overlays/example/image/kustomization.yaml", rf"platform/tls-injector:{_VERSION}"),
)
_SEMVER = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
CHART = "charts/tls-injector"
# The image lines of the chart's values.yaml that a release pins: the first `repository:` and `digest:`
# under `image:` (values.schema.json checks their form again at install).
_IMAGE_REPOSITORY = re.compile(r'(?m)^(image:\n(?:  .*\n|\s*#.*\n)*?  repository: )\S+$')
_IMAGE_DIGEST = re.compile(r'(?m)^(image:\n(?:  .*\n|\s*#.*\n)*?  digest: )""$')
_REPOSITORY = re.compile(r"[a-z0-9][a-z0-9.:-]*(?:/[a-z0-9._-]+)+")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def version(root: Path = ROOT) -> str:
    found = re.search(SOURCE[1], (root / SOURCE[0]).read_text())
    if found is None:
        raise SystemExit(f"{SOURCE[0]}: no [project] version line")
    return found[1]


def mismatches(root: Path = ROOT) -> list[str]:
    """One line per copy that is missing or differs from the source, naming the file and what it holds."""
    wanted = version(root)
    problems = []
    for name, pattern in COPIES:
        found = re.findall(pattern, (root / name).read_text())
        if not found:
            problems.append(f"{name}: no copy of the version (pattern {pattern!r} matches nothing)")
        problems += [f"{name}: {copy}, not {wanted}" for copy in found if copy != wanted]
    return problems


def set_version(new: str, root: Path = ROOT) -> None:
    if not _SEMVER.fullmatch(new):
        raise SystemExit(f"not a version of the form MAJOR.MINOR.PATCH[-PRE]: {new}")
    for name, pattern in (SOURCE, *COPIES):
        path = root / name
        text = path.read_text()
        path.write_text(re.sub(pattern, lambda m: m[0].replace(m[1], new), text))


def pin_chart(repository: str, digest: str, out: Path, root: Path = ROOT) -> Path:
    """Copy the chart into out/tls-injector with its default image set to repository@digest: the chart a
    release packages, so `helm install` of it by version pulls the image the release pushed and signed."""
    if not _REPOSITORY.fullmatch(repository):
        raise SystemExit(f"not an image repository (registry/path, no tag or digest): {repository}")
    if not _DIGEST.fullmatch(digest):
        raise SystemExit(f"not a digest of the form sha256:<64 hex>: {digest}")
    target = out / Path(CHART).name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / CHART, target)
    values = target / "values.yaml"
    text, repositories = _IMAGE_REPOSITORY.subn(lambda m: m[1] + repository, values.read_text(), count=1)
    text, digests = _IMAGE_DIGEST.subn(lambda m: m[1] + f'"{digest}"', text, count=1)
    if (repositories, digests) != (1, 1):
        raise SystemExit(f"{CHART}/values.yaml: no image.repository or empty image.digest line to pin")
    values.write_text(text)
    return target


def main(argv: list[str]) -> int:
    if argv == ["check"]:
        problems = mismatches()
        for line in problems:
            print(f"release: {line}", file=sys.stderr)
        return 1 if problems else 0
    if len(argv) == 2 and argv[0] == "set-version":
        set_version(argv[1])
        return main(["check"])
    if len(argv) == 4 and argv[0] == "pin-chart":
        print(pin_chart(argv[1], argv[2], Path(argv[3])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
