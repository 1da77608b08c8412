"""The status page in a real browser: headless Chromium loads it from a reconciler running on the API
emulator, at a phone's width; the test reads what the browser shows and keeps a screenshot."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx

from tests.operator.scene import Scene
from tests.support.browser import PHONE, dump_dom, screenshot


def test_a_phone_browser_shows_what_needs_attention_first_then_the_cas_then_the_workloads_sorted(
    scene: Scene, tmp_path: Path
) -> None:
    dom = dump_dom(scene.base + "/?sort=namespace")
    text = re.sub(r"<[^>]+>", " ", dom)
    attention, cas, workloads = (text.index(h) for h in ("Needs attention", "Certificate authorities", "Workloads (8)"))
    assert attention < cas < workloads
    head = text[attention:cas]
    assert "Certificate ns0/late-tls (Deployment/late) waits: Secret ns0/late-tls: certificate issue waits" in head
    assert "Pod ns1/orphan (workload orphan) runs without the injection: restart its workload" in head
    assert "CA rotation in tls-injector-ca" in head
    # Each says why, where the operator looks: the conflict as a conflict (not "waits" or "not issued yet"),
    # and the refused service names, which showed nowhere.
    assert ("Certificate ns0/squat-tls (Deployment/squat) is in conflict with another object: Secret ns0/squat-tls "
            "exists and is not managed by tls-injector") in head
    assert "ns0/squat-tls (Deployment/squat) waits" not in head
    assert "Certificate ns1/greedy-tls (Deployment/greedy): ServiceNamesRefused: Secret ns1/greedy-tls" in head
    table = text[workloads:]
    assert "SecretConflict: Secret ns0/squat-tls exists and is not managed by tls-injector" in table
    assert "Issued" in table
    assert "untrusted (signs)" not in text[cas:workloads]
    assert "trusted-used" in text[cas:workloads]
    assert "CN=user CA 2" in text[cas:workloads]
    namespaces = re.findall(r"<tr><td>(ns\d)</td>", dom[dom.index("Workloads (8)"):])
    assert namespaces == sorted(namespaces)
    assert len(namespaces) == 8
    # The column links sort on the server: by Secret, late-tls comes between app1-tls and orphan-tls.
    by_secret = re.findall(r"<td>([a-z0-9]+-tls)</td>", dump_dom(scene.base + "/?sort=secret"))
    assert by_secret == sorted(by_secret)

    shot = screenshot(scene.base + "/", tmp_path / "status-page.png", size=PHONE)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(shot.read_bytes()[16:20], "big")
    assert width == PHONE[0]
    if keep := _keep_dir():
        shutil.copy(shot, keep / shot.name)


def test_the_page_loads_nothing_but_itself(scene: Scene) -> None:
    page = httpx.get(scene.base + "/").text
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert "url(" not in page


def _keep_dir() -> Path | None:
    """TLS_INJECTOR_SCREENSHOTS names a directory to keep the screenshot in (bench/results holds one)."""
    import os

    found = os.environ.get("TLS_INJECTOR_SCREENSHOTS")
    return Path(found) if found else None
