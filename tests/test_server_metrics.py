"""ServerMetrics.observe changes prometheus_client's values directly (tls_injector.web.metrics): it must leave
exactly what Counter.inc and Histogram.observe would, in one process and in a worker's shared files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tls_injector.web.metrics import ENDPOINTS, LATENCY_BUCKETS, OUTCOMES, ServerMetrics

# Every bucket's bound itself (a value on a bound falls in that bucket), just above and below each, zero,
# and past the last bound (+Inf).
SECONDS = [0.0, 1e-9, *LATENCY_BUCKETS, *(b * 1.0001 for b in LATENCY_BUCKETS), *(b * 0.9999 for b in LATENCY_BUCKETS),
           11.0, 1e6]
CALLS = [(ENDPOINTS[n % len(ENDPOINTS)], OUTCOMES[n % len(OUTCOMES)], s) for n, s in enumerate(SECONDS * 3)]


def _without_created(text: bytes) -> list[bytes]:
    """The exposition less the `_created` lines (each metric's creation time differs between the two)."""
    return [line for line in text.splitlines() if b"_created" not in line]


def test_observe_leaves_what_counter_inc_and_histogram_observe_leave() -> None:
    direct, wrapped = ServerMetrics(), ServerMetrics()
    assert direct.observe == direct._add  # one process: the additions made to prometheus_client's floats
    for endpoint, outcome, seconds in CALLS:
        direct.observe(endpoint, outcome, seconds)
        wrapped.requests.labels(endpoint, outcome).inc()
        wrapped.latency.labels(endpoint).observe(seconds)
    assert _without_created(direct.render()) == _without_created(wrapped.render())
    assert b'tls_injector_admission_duration_seconds_bucket{endpoint="mutate",le="0.0005"}' in direct.render()


RENDER_IN_A_WORKER = """
import sys
from pathlib import Path
from tls_injector.web.metrics import ServerMetrics, render_shared
from tests.test_server_metrics import CALLS
metrics = ServerMetrics()
assert metrics.shared_dir is not None
assert metrics.observe == metrics._inc  # a worker: each value's own inc writes its slot of the file
for endpoint, outcome, seconds in CALLS:
    if sys.argv[1] == "direct":
        metrics.observe(endpoint, outcome, seconds)
    else:
        metrics.requests.labels(endpoint, outcome).inc()
        metrics.latency.labels(endpoint).observe(seconds)
sys.stdout.buffer.write(render_shared(Path(metrics.shared_dir)))
"""


def test_in_a_worker_observe_writes_the_shared_files_as_the_wrappers_do(tmp_path: Path) -> None:
    rendered = {}
    for way in ("direct", "wrapped"):
        directory = tmp_path / way
        directory.mkdir()
        rendered[way] = subprocess.run(
            [sys.executable, "-c", RENDER_IN_A_WORKER, way], capture_output=True, check=True, timeout=60,
            env={"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"},
            cwd=Path(__file__).parent.parent).stdout
        assert list(directory.iterdir()), "the worker wrote no shared file"
    assert b'outcome="patched"' in rendered["direct"]
    # The files list series in the order each was first written: the same lines, not in the same order.
    assert sorted(_without_created(rendered["direct"])) == sorted(_without_created(rendered["wrapped"]))
