"""`serve --workers N`: throughput and CPU per request at 1 and 2 workers, and the model beyond.

    python -m bench.workers [--seconds 5] [--rounds 3]

On this 2-core machine: 1 worker is pinned to core 0 with wrk on core 1 (the admission bench's setup);
2 workers get both cores and share them with wrk, so their throughput is what is left beside the load
generator, not what two free cores give. What carries to more cores is the CPU each request costs,
summed over the supervisor and every worker (from /proc): if it does not grow with N, N workers on N
free cores answer N / (CPU per request) requests a second. The table says which figures are measured
and which are modelled from that.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.admission import (
    CLIENT_CORE,
    SERVER_CORE,
    STREAM_LENGTH,
    Pki,
    _wait_ready,
    client_context,
    cpu_seconds,
    ensure_wrk,
    free_port,
    make_pki,
    pinned,
    saturate,
    stop,
)
from bench.payloads import replica_stream

ROOT = Path(__file__).resolve().parents[1]
MODELLED = (4, 8)


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a supervisor and its worker processes."""
    total = cpu_seconds(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children")
    with contextlib.suppress(OSError):
        for child in children.read_text().split():
            with contextlib.suppress(OSError):
                total += cpu_seconds(int(child))
    return total


@contextlib.contextmanager
def pool(workers: int, cores: str, *, port: int, pki: Pki, workdir: Path) -> Iterator[int]:
    argv = [sys.executable, "-m", "tls_injector", "serve", "--no-reconciler", "--workers", str(workers), "--host",
            "127.0.0.1", "--port", str(port), "--tls-cert-file", str(pki.cert_file),
            "--tls-private-key-file", str(pki.key_file), "--log-level", "info"]
    with (workdir / f"serve-{workers}.log").open("wb") as log:
        process = subprocess.Popen(pinned(argv, cores), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait_ready(port, client_context(pki), process)
        time.sleep(1.0 if workers > 1 else 0)  # the last worker may still be starting after the first answers
        yield process.pid
    finally:
        stop(process)


def measure(workers: int, cores: str, *, seconds: float, pki: Pki, wrk: str | None,
            workdir: Path) -> tuple[float, float]:
    """(req/s, CPU us per request over every process) for one saturation run."""
    port = free_port()
    body_file = workdir / "mutate.json"
    with pool(workers, cores, port=port, pki=pki, workdir=workdir) as pid:
        context = client_context(pki)
        saturate(wrk=wrk, port=port, context=context, path="/mutate", body_file=body_file, seconds=2)  # warm
        before = tree_cpu_seconds(pid)
        total, errors, wall, _ = saturate(wrk=wrk, port=port, context=context, path="/mutate",
                                          body_file=body_file, seconds=seconds)
        used = tree_cpu_seconds(pid) - before
    if errors:
        raise RuntimeError(f"{errors} failed requests with {workers} workers")
    return total / wall, used / total * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    wrk = ensure_wrk()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        pki = make_pki(workdir)
        (workdir / "mutate.json").write_bytes(b"\n".join(replica_stream(STREAM_LENGTH)) + b"\n")
        runs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
        layout = {1: SERVER_CORE, 2: f"{SERVER_CORE},{CLIENT_CORE}"}
        for _ in range(args.rounds):  # alternating, so drift on the machine falls on both alike
            for workers in (1, 2):
                runs[workers].append(measure(workers, layout[workers], seconds=args.seconds, pki=pki, wrk=wrk,
                                             workdir=workdir))
    rps = {n: statistics.median(r[0] for r in runs[n]) for n in runs}
    cpu = {n: statistics.median(r[1] for r in runs[n]) for n in runs}
    print(f"`python -m bench.workers --seconds {args.seconds:g} --rounds {args.rounds}` (wrk -t1 -c16, /mutate, "
          f"the replicas stream of bench.admission, log level info; medians of {args.rounds} alternating rounds)\n")
    print("| workers | cores | req/s | CPU us per request (all processes) | |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| 1 | {layout[1]} | {rps[1]:,.0f} | {cpu[1]:.0f} | measured; wrk on core {CLIENT_CORE} |")
    print(f"| 2 | {layout[2]} | {rps[2]:,.0f} | {cpu[2]:.0f} | measured; wrk shares both cores with the workers |")
    per_request = cpu[2]
    for n in MODELLED:
        print(f"| {n} | {n} free | {n * 1e6 / per_request:,.0f} | {per_request:.0f} | modelled: "
              f"{n} x 1e6 / CPU per request at 2 workers |")
    efficiency = cpu[1] / cpu[2]
    verdict = "met" if efficiency >= 0.8 else "NOT met"
    print(f"\nCPU per request at 2 workers vs 1: {cpu[2] / cpu[1]:.2f}x, so N workers on N free cores give "
          f"{efficiency:.2f} x N x one worker's throughput (target >= 0.8 x N: {verdict}).")
    print(f"Measured beside the load generator: 2 workers {rps[2] / rps[1]:.2f}x one worker's req/s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
