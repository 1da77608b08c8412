"""bench.tenant_turns end to end on a small tenant, so the benchmark cannot rot: the real `reconcile` loop
against the emulator, 3 workloads asking for RSA-2048 (64 ms a key, where the bench's figures take
RSA-4096), one probe, every phase converging and counted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.tenant_turns import parse, run


# The tenant's convergence after its churn stops usually takes seconds; it has been seen to take 27 s here
# and over 60 s in one CI run (cause not found yet): bounded at 120 s, so a hang still fails.
@pytest.mark.timeout(150)
def test_the_tenant_converges_and_the_probe_is_issued_and_counted(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["--workloads", "3", "--probes", "1", "--probe-every", "0.5", "--key-algorithm", "rsa-2048",
                  "--timeout", "120"])
    assert run(args, tmp_path) == 0
    out = capsys.readouterr().out
    probe = re.search(r"probe 0 at .*: ([0-9.]+) s, ([0-9]+) calls", out)
    assert probe is not None, out
    assert 1 <= int(probe[2]) <= 10  # the probe's Secret and its Event: 2
    assert "tenant: 3 rsa-2048 workloads" in out
