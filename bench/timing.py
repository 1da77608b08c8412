"""CPU time per call, the measure the in-process benchmarks share (wall time is noisy on a busy machine)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_us(call: Callable[[], object], *, number: int, repeat: int) -> float:
    """Median over `repeat` runs of the process CPU microseconds per call."""
    runs = []
    for _ in range(repeat):
        started = time.process_time_ns()
        for _ in range(number):
            call()
        runs.append((time.process_time_ns() - started) / number / 1000)
    return statistics.median(runs)
