"""`inject` over many manifests shows a progress line on stderr when stderr is a terminal, and prints
nothing extra when it is not (a pipe, a CI log)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COUNT = 250  # some 3 s unloaded (ruamel reads ~150 such documents a second): past the line's 1 s delay
DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{i}
spec:
  selector:
    matchLabels: {{app: web-{i}}}
  template:
    metadata:
      labels:
        app: web-{i}
        tls-injector.io/inject: "true"
    spec:
      containers:
      - name: app
        image: nginx
"""


def manifests(tmp_path: Path) -> Path:
    path = tmp_path / "many.yaml"
    path.write_text("---\n".join(DEPLOYMENT.format(i=i) for i in range(COUNT)))
    return path


def inject(path: Path, *, stderr: int) -> subprocess.Popen[bytes]:
    """The real command; its output goes to a file, so reading its stderr alone never blocks it."""
    with (path.parent / "out.yaml").open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "tls_injector", "inject", "-f", str(path)], cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=stderr)


def output(tmp_path: Path) -> list[object]:
    return list(yaml.safe_load_all((tmp_path / "out.yaml").read_text()))


@pytest.mark.parametrize("columns", [120, 0], ids=["120 columns", "no size"])
def test_a_long_inject_shows_progress_on_a_terminal(tmp_path: Path, columns: int) -> None:
    """On a terminal 120 columns wide, and on one that reports no size (a fresh pseudo-terminal, as
    `script` or a CI runner's allocated tty give), where a line cut to the width would be nothing."""
    leader, follower = pty.openpty()
    if columns:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = inject(manifests(tmp_path), stderr=follower)
    os.close(follower)
    screen = b""
    with contextlib.suppress(OSError):  # EIO once the process has closed the terminal
        while chunk := os.read(leader, 4096):
            screen += chunk
    process.wait(timeout=60)
    os.close(leader)
    assert process.returncode == 0
    text = screen.decode()
    assert "tls-injector inject" in text
    assert f"/{COUNT} [" in text, text[-400:]
    assert "document/s" in text or "s/document" in text
    assert len(output(tmp_path)) == COUNT, "the output is untouched by it"


def test_a_long_inject_into_a_pipe_prints_no_progress(tmp_path: Path) -> None:
    process = inject(manifests(tmp_path), stderr=subprocess.PIPE)
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (0, b"")
    assert len(output(tmp_path)) == COUNT
