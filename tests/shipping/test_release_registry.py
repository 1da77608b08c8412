"""docs/release.md run as written against a registry of the suite's own, then docs/install.md's verify step.

The registry is the distribution registry on 127.0.0.1 (TLS from a CA made here: tests/shipping/registry.py).
The release steps push the image built from the Dockerfile (tools/image.py's OCI archive), pin the chart's
image to the digest the registry returned and push the chart as an OCI artifact, make SPDX SBOMs of the
wheel and the image with syft and attest both on the image, and sign image and chart with cosign by a key
pair made here. Then, as a user would before installing: install.md's verify block passes for the signed
image and chart, and is refused for an image nobody signed, for an image pushed over the release's tag
afterwards, and for a chart pushed over the chart's version.

Not here: `helm install` from the registry on a real node, with containerd pulling the image by digest
(tests/node/test_install_paths.py, with the same release steps: tests/shipping/release_flow.py).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.shipping.helm import helm
from tests.shipping.install_doc import run
from tests.shipping.registry import running
from tests.shipping.release_flow import INSTALL_DOC, Released, release_to, the_block
from tests.shipping.support import ROOT
from tools import release

pytestmark = pytest.mark.timeout(2400)


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Released]:
    with running(tmp_path_factory.mktemp("registry")) as registry:
        yield release_to(registry, tree=tmp_path_factory.mktemp("release"), home=tmp_path_factory.mktemp("home"))


def _archive_manifest_digest(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        (manifest,) = json.load(member)["manifests"]
    return str(manifest["digest"])


def test_the_registry_serves_under_the_tag_the_image_that_was_built(released: Released) -> None:
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", released.digest)
    assert released.digest == _archive_manifest_digest(released.archive)
    status, headers, body = released.registry.get(
        f"/v2/platform/tls-injector/manifests/{release.version()}",
        accept="application/vnd.oci.image.manifest.v1+json")
    assert status == 200
    assert headers["Docker-Content-Digest"] == released.digest
    assert "sha256:" + hashlib.sha256(body).hexdigest() == released.digest


def _pulled_chart(released: Released, into: Path) -> Path:
    pulled = released.sh(f'helm pull "oci://$REGISTRY/charts/tls-injector" --version "$V" --untar --untardir "{into}"',
                         V=release.version())
    assert pulled.returncode == 0, pulled.stderr
    return into / "tls-injector"


def test_the_released_chart_is_pulled_by_version_and_pins_the_image_by_digest(released: Released,
                                                                               tmp_path: Path) -> None:
    version = release.version()
    chart = _pulled_chart(released, tmp_path)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert (meta["version"], meta["appVersion"]) == (version, version)
    values = yaml.safe_load((chart / "values.yaml").read_text())["image"]
    assert (values["repository"], values["digest"]) == (f"{released.prefix}/tls-injector", released.digest)
    rendered = subprocess.run([helm(), "template", "tls-injector", str(chart), "--namespace", "tls-injector"],
                              capture_output=True, text=True, check=True, timeout=60).stdout
    images = {found.strip('"') for found in re.findall(r"(?m)^\s+image: (\S+)$", rendered)}
    assert images == {f"{released.prefix}/tls-injector@{released.digest}"}
    assert release.mismatches() == []


def _spdx_packages(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(re.sub(r"[-_.]+", "-", p["name"]).lower(), p.get("versionInfo", "")) for p in document["packages"]}


def _locked() -> set[tuple[str, str]]:
    pins = re.findall(r"(?m)^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "requirements.lock").read_text())
    return {(re.sub(r"[-_.]+", "-", name).lower(), pinned) for name, pinned in pins}


def test_the_sboms_list_the_wheel_and_every_locked_package_of_the_image(released: Released) -> None:
    version = release.version()
    dist = released.root / "dist"
    wheel = json.loads((dist / f"tls_injector-{version}.wheel.spdx.json").read_text())
    image = json.loads((dist / f"tls-injector-{version}.image.spdx.json").read_text())
    assert wheel["spdxVersion"].startswith("SPDX-")
    assert image["spdxVersion"].startswith("SPDX-")
    assert ("tls-injector", version) in _spdx_packages(wheel)
    missing = _locked() - _spdx_packages(image)
    assert not missing, f"packages of requirements.lock the image's SBOM does not list: {sorted(missing)}"
    assert ("tls-injector", version) in _spdx_packages(image)


def _attested(released: Released, key: str) -> subprocess.CompletedProcess[str]:
    return released.sh(f'cosign verify-attestation --key {key} --insecure-ignore-tlog=true --type spdxjson '
                       '"$REGISTRY/tls-injector@$DIGEST"')


def test_both_sboms_are_attested_on_the_image_by_the_release_key(released: Released) -> None:
    result = _attested(released, "cosign.pub")
    assert result.returncode == 0, result.stderr
    predicates = []
    for line in result.stdout.splitlines():
        statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
        assert statement["subject"][0]["digest"]["sha256"] == released.digest.removeprefix("sha256:")
        predicates.append(statement["predicate"])
    version = release.version()
    dist = released.root / "dist"
    on_disk = [json.loads((dist / name).read_text()) for name in
               (f"tls_injector-{version}.wheel.spdx.json", f"tls-injector-{version}.image.spdx.json")]
    assert sorted(p["documentNamespace"] for p in predicates) == sorted(d["documentNamespace"] for d in on_disk)


def test_another_key_verifies_nothing(released: Released, tmp_path: Path) -> None:
    made = run("cosign generate-key-pair", cwd=tmp_path, tools_first=released.tools, **released.env)
    assert made.returncode == 0, made.stderr
    other = tmp_path / "cosign.pub"
    assert _attested(released, str(other)).returncode != 0
    for ref in ("$REGISTRY/tls-injector@$DIGEST", f"$REGISTRY/charts/tls-injector:{release.version()}"):
        refused = released.sh(f'cosign verify --key "{other}" --insecure-ignore-tlog=true "{ref}"')
        assert refused.returncode != 0, ref


def _tiny_image(into: Path, text: str) -> Path:
    """An OCI image layout with one layer holding one file: an image nobody signed."""
    blobs = into / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}", len(data)

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    layer, layer_size = blob(gzip.compress(raw.getvalue(), mtime=0))
    config, config_size = blob(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                                           "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode())
    manifest, manifest_size = blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer,
                    "size": layer_size}]}).encode())
    (into / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (into / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest, "size": manifest_size}]}))
    return into


def _push(released: Released, layout: Path, tag: str) -> str:
    digest_file = layout.with_suffix(".digest")
    pushed = released.sh(f'skopeo copy --quiet --digestfile "{digest_file}" "oci:{layout}" '
                         f'"docker://$REGISTRY/tls-injector:{tag}"')
    assert pushed.returncode == 0, pushed.stderr
    return digest_file.read_text().strip()


def _verify_step(released: Released, digest: str) -> subprocess.CompletedProcess[str]:
    """docs/install.md's verify block, as written, for the image `digest`."""
    return released.sh(the_block(INSTALL_DOC, "registry").text, DIGEST=digest)


def test_install_verify_passes_for_the_signed_release_and_refuses_an_unsigned_image(released: Released,
                                                                                  tmp_path: Path) -> None:
    assert f"/charts/tls-injector:{release.version()}" in the_block(INSTALL_DOC, "registry").text
    signed = _verify_step(released, released.digest)
    assert signed.returncode == 0, signed.stderr
    unsigned = _push(released, _tiny_image(tmp_path / "unsigned", "nobody signed this"), "unsigned")
    refused = _verify_step(released, unsigned)
    assert refused.returncode != 0
    assert "no signatures found" in refused.stderr.lower() or "no matching signatures" in refused.stderr.lower(), \
        refused.stderr
    by_tag = released.sh('cosign verify --key cosign.pub --insecure-ignore-tlog=true "$REGISTRY/tls-injector:unsigned"')
    assert by_tag.returncode != 0


def test_an_image_and_a_chart_pushed_over_the_release_tags_are_refused(released: Released, tmp_path: Path) -> None:
    """Last in this file: it moves the release's tags (the fixture's registry is this module's alone)."""
    version = release.version()
    verify_tag = 'cosign verify --key cosign.pub --insecure-ignore-tlog=true "$REGISTRY/tls-injector:$V"'
    assert released.sh(verify_tag, V=version).returncode == 0
    moved = _push(released, _tiny_image(tmp_path / "over", "pushed over the tag"), version)
    assert moved != released.digest
    assert released.sh(verify_tag, V=version).returncode != 0, "by tag: the tag now names unsigned bytes"
    assert _verify_step(released, moved).returncode != 0, "by digest: the new bytes are unsigned"
    still = _verify_step(released, released.digest)
    assert still.returncode == 0, f"by digest, the signed release still verifies:\n{still.stderr}"
    # The chart: the same version pushed again with other bytes (a changed value) moves its tag.
    chart = _pulled_chart(released, tmp_path / "chart")
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace("pullPolicy: IfNotPresent", "pullPolicy: Always", 1))
    repushed = released.sh(f'helm package "{chart}" --destination "{tmp_path}" && '
                           f'helm push "{tmp_path}/tls-injector-$V.tgz" "oci://$REGISTRY/charts"', V=version)
    assert repushed.returncode == 0, repushed.stderr
    refused = _verify_step(released, released.digest)
    assert refused.returncode != 0, "the chart's version now names a chart nobody signed"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(120)
def test_the_registry_is_stopped_when_the_test_ends_even_by_an_error(tmp_path: Path) -> None:
    pids: list[int] = []

    def failing_test() -> None:
        with running(tmp_path / "one") as registry:
            assert registry.get("/v2/")[0] == 200
            pids.append(registry.pid)
            raise RuntimeError("the test failed")

    with pytest.raises(RuntimeError, match="the test failed"):
        failing_test()
    assert pids
    assert _gone(pids[0])


@pytest.mark.timeout(120)
def test_a_registry_that_cannot_listen_fails_the_test_with_its_log_and_is_not_left(tmp_path: Path) -> None:
    with running(tmp_path / "first") as first:
        port = int(first.host.rsplit(":", 1)[1])
        with pytest.raises(AssertionError, match=r"the registry exited \d+:(.|\n)*address already in use"), \
                running(tmp_path / "second", port=port):
            pass
        assert first.get("/v2/")[0] == 200
