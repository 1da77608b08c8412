"""Container images made here, as OCI image-layout tars that `ctr images import` reads.

No registry is reachable from this machine, so the node tier makes its own images: one uncompressed
layer holding a root filesystem, its config and manifest, and an index naming it. Two are made:
- `pause`: the sandbox image containerd is told to use (its `pinned_images.sandbox`), holding only
  node-probe (tools/node.py), whose `pause` command waits for a stop signal;
- `busybox`: Debian's busybox-static with a link for each applet the tests use, plus node-probe (TLS
  server and client). Debian's busybox `wget -T` crashes; the tests use node-probe for HTTPS instead.

The tars are rebuilt only when their inputs change: the name carries a digest of them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

# Fixed times and owners: the same inputs give the same bytes, so the same image digest.
_EPOCH = 0
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = ("sh", "ls", "cat", "stat", "id", "sleep", "echo", "test", "true", "false", "wc",
                   "head", "grep", "nc", "wget", "env", "mkdir", "find", "httpd")


@dataclass(frozen=True)
class Image:
    name: str  # what pods give as `image:`, with imagePullPolicy: Never
    archive: Path


@dataclass(frozen=True)
class _Entry:
    path: str
    data: bytes | None = None  # a file; None is a directory
    mode: int = 0o755
    link: str | None = None  # a symlink's target


def _layer(entries: list[_Entry]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for entry in entries:
            info = tarfile.TarInfo(entry.path)
            info.mtime, info.uid, info.gid, info.mode = _EPOCH, 0, 0, entry.mode
            if entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
                layer.addfile(info)
            elif entry.data is None:
                info.type = tarfile.DIRTYPE
                layer.addfile(info)
            else:
                info.size = len(entry.data)
                layer.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def write_oci_archive(target: Path, *, name: str, entries: list[_Entry], entrypoint: list[str],
                      user: str = "") -> None:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/...) in a tar at `target`."""
    blobs: dict[str, bytes] = {}
    layer = _layer(entries)
    layer_ref = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(blobs, layer)}
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": user, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_ref["digest"]]},
    }
    config_ref = {"mediaType": "application/vnd.oci.image.config.v1+json",
                  **_blob(blobs, json.dumps(config, sort_keys=True).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_ref, "layers": [layer_ref]}
    manifest_ref = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **_blob(blobs, json.dumps(manifest, sort_keys=True).encode()),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {"io.containerd.image.name": name,
                                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_ref]}
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps(index, sort_keys=True).encode(),
             **{f"blobs/sha256/{digest.split(':', 1)[1]}": data for digest, data in blobs.items()}}
    # Two test sessions may make the same archive at once (tools/dev.py runs one beside the suite): each
    # writes its own, and the rename of identical bytes is atomic.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    with tarfile.open(partial, "w") as archive:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _EPOCH
            archive.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, _EPOCH
            archive.addfile(info, io.BytesIO(data))
    partial.rename(target)


def _cached(folder: Path, stem: str, inputs: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{stem}-{hashlib.sha256(inputs).hexdigest()[:16]}.tar"


def pause_image(folder: Path, probe: Path) -> Image:
    name = "tls-injector.test/pause:1"
    binary = probe.read_bytes()
    target = _cached(folder, "pause", binary)
    if not target.exists():
        write_oci_archive(target, name=name, entries=[_Entry("pause", binary)], entrypoint=["/pause", "pause"],
                          user="65535")
    return Image(name, target)


def busybox_image(folder: Path, probe: Path) -> Image:
    name = "tls-injector.test/busybox:1"
    if not BUSYBOX.is_file():
        raise RuntimeError(f"{BUSYBOX} is missing: Debian's busybox-static makes the node tier's test image "
                           "(tools/dev.py test installs it)")
    busybox, binary = BUSYBOX.read_bytes(), probe.read_bytes()
    if b"ld-linux" in busybox[:4096]:  # an ELF interpreter: Debian's dynamic `busybox`, not busybox-static
        raise RuntimeError(f"{BUSYBOX} is dynamically linked: install busybox-static (it replaces busybox)")
    target = _cached(folder, "busybox", busybox + binary + ",".join(BUSYBOX_APPLETS).encode())
    if not target.exists():
        entries = [_Entry("bin"), _Entry("bin/busybox", busybox), _Entry("bin/node-probe", binary),
                   *(_Entry(f"bin/{applet}", link="busybox") for applet in BUSYBOX_APPLETS),
                   _Entry("tmp", mode=0o1777), _Entry("etc"),
                   _Entry("etc/passwd", b"root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
                          mode=0o644),
                   _Entry("etc/group", b"root:x:0:\nnobody:x:65534:\n", mode=0o644)]
        write_oci_archive(target, name=name, entries=entries, entrypoint=["/bin/sh"])
    return Image(name, target)


def archive_name_and_digest(archive: Path) -> tuple[str, str]:
    """The name an OCI archive gives its one image (`io.containerd.image.name`, what `ctr images import`
    names it) and its manifest digest (what a registry stores it under, and a pod names it by)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None, f"{archive} holds no index.json"
        (manifest,) = json.load(member)["manifests"]
    return str(manifest["annotations"]["io.containerd.image.name"]), str(manifest["digest"])
