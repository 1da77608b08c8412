"""bench.reconcile_memory reads the reconciler's resident size step by step (its cache, then full passes) and,
traced, Python's heap beside it; held here so it cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.reconcile import populate
from bench.reconcile_memory import measure
from tests.kubeapi import Emulator

ROOT = Path(__file__).resolve().parent.parent


def test_each_step_is_measured_and_the_first_pass_issues_what_the_cache_then_holds(kubeapi: Emulator) -> None:
    populate(kubeapi, workloads=60, namespaces=6, controller_objects=True)
    steps = measure(kubeapi.url, 2)
    assert [name for name, *_ in steps] == ["imported", "cache listed", "pass 1", "pass 2"]
    assert all(sizes["VmRSS"] > 0 and sizes["VmHWM"] >= sizes["VmRSS"] for _, sizes, _, _ in steps), steps
    assert all(traced is None for _, _, traced, _ in steps), "not traced unless asked"
    assert all(cpu > 0 for name, _, _, cpu in steps if name.startswith("pass")), "each pass's CPU beside it"
    leaves = [s for s in kubeapi.objects("secrets") if s["metadata"]["name"].endswith("-tls")]
    assert len(leaves) == 60, "the first pass issued every workload's Secret"


def test_traced_the_command_prints_the_heap_beside_the_resident_size_and_the_lines_holding_most() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.reconcile_memory", "--workloads", "30", "--passes", "1",
                           "--trace", "--top", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| pass 1")]
    assert len(rows) == 1, done.stdout
    assert float(rows[0][3]) > 0, "the traced heap is beside the resident size"
    assert "the 3 lines holding the most at the end:" in done.stdout
