"""Headless Chromium (Debian's `chromium`) for the status page's browser test.

`tools/dev.py test` installs the package when it is missing (as root, through apt); without it the
test fails rather than skips, since the page would go unchecked. Flags: no sandbox (CI runs as root),
no GPU, and none of Chromium's own background traffic (update checks, sync, field trials), which a
closed network refuses many times over; a fresh profile every run.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--hide-scrollbars")
# A phone's viewport (CSS pixels of a common 6.1-inch Android phone).
PHONE = (412, 915)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Debian's chromium is not installed: `python3.11 tools/dev.py test` installs it (as root)"
    return found


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=timeout, check=True)


def dump_dom(url: str, *, size: tuple[int, int] = PHONE) -> str:
    """The DOM after the page loaded, serialized: what the browser made of it."""
    return _run(f"--window-size={size[0]},{size[1]}", "--dump-dom", url).stdout.decode()


def screenshot(url: str, path: Path, *, size: tuple[int, int] = PHONE) -> Path:
    _run(f"--window-size={size[0]},{size[1]}", f"--screenshot={path}", url)
    assert path.stat().st_size > 0
    return path
