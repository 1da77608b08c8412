"""Soak: one worker at a fixed rate for minutes, with the traffic a cluster sends; is its memory flat?

    python -m bench.soak [--seconds 600] [--rate 500] [--warmup 60] [--shapes 2000]

The server (`serve --no-reconciler`, log level info, one worker) is pinned to core 0 and this load
generator to core 1. The mix, drawn from a seeded random so runs compare:

- 84 % /mutate Pod CREATEs in `--shapes` different shapes (pod names, owners, images, labels), as the
  pods of many Deployments arrive; every shape is seen again, so the remembered answers fill up and must
  stay bounded;
- 10 % /validate Deployment UPDATEs in as many shapes, a new image each;
- 3 % malformed reviews (broken JSON or a review without a request), answered 400;
- 2 % bodies over the limit, declared by Content-Length, answered 413 and the connection closed;
- 1 % connections dropped by the client right after the request is sent, without reading the answer;
- every connection is also closed and reopened after 50 requests, as an apiserver's client does now and
  then; so connections come and go at rate / 50 a second besides those above.

RSS is read from /proc every `--interval` seconds. The warm-up (first connections, imports, caches
filling) is excluded; the verdict is on the samples after it: flat means max - min within 10 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import loadgen
from bench.admission import (
    CLIENT_CORE,
    SERVER_CORE,
    Pki,
    _wait_ready,
    client_context,
    free_port,
    make_pki,
    pinned,
    stop,
)
from bench.payloads import deployment_update_review, encoded, pod_create_review

ROOT = Path(__file__).resolve().parents[1]
FLAT_BYTES = 10 * 1024 * 1024  # the bound: RSS within +- 10 MiB after the warm-up
RECONNECT_EVERY = 50
CONNECTIONS = 16
OVERSIZE_BYTES = 8 * 1024 * 1024  # declared only, past the 3 MiB body limit: the server answers 413 at the head
MIX = (("mutate", 0.84), ("validate", 0.10), ("malformed", 0.03), ("oversize", 0.02), ("drop", 0.01))
EXPECTED = {"mutate": 200, "validate": 200, "malformed": 400, "oversize": 413}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def pod_shapes(count: int) -> list[bytes]:
    base = pod_create_review()
    shapes = []
    for i in range(count):
        review = copy.deepcopy(base)
        review["request"]["uid"] = f"00000000-0000-4000-8000-{i:012d}"
        pod = review["request"]["object"]
        hash_ = f"{i:010x}"
        pod["metadata"]["generateName"] = f"app{i % 400}-{hash_}-"
        pod["metadata"]["labels"]["app"] = f"app{i % 400}"
        pod["metadata"]["labels"]["pod-template-hash"] = hash_
        pod["metadata"]["ownerReferences"][0]["name"] = f"app{i % 400}-{hash_}"
        pod["spec"]["containers"][0]["image"] = f"registry.example/app{i % 400}:{i}"
        shapes.append(loadgen.http_request("/mutate", encoded(review)))
    return shapes


def deployment_shapes(count: int) -> list[bytes]:
    base = deployment_update_review()
    shapes = []
    for i in range(count):
        review = copy.deepcopy(base)
        review["request"]["name"] = f"app{i}"
        for obj in (review["request"]["object"], review["request"]["oldObject"]):
            obj["metadata"]["name"] = f"app{i}"
        review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["image"] = f"registry.example/app:{i}"
        shapes.append(loadgen.http_request("/validate", encoded(review)))
    return shapes


MALFORMED = [loadgen.http_request("/mutate", b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1",'),
             loadgen.http_request("/validate", json.dumps({"kind": "AdmissionReview",
                                                           "apiVersion": "admission.k8s.io/v1"}).encode())]
OVERSIZE = (f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {OVERSIZE_BYTES}\r\n\r\n").encode() + b"{" * 4096


@dataclass
class Interval:
    latencies: list[float] = field(default_factory=list)
    unexpected: int = 0
    failed: int = 0


@dataclass
class Soak:
    pid: int
    interval: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (seconds, rss, fds)
    intervals: list[Interval] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def sample(self, at: float, due: float) -> float:
        """Record RSS and descriptors now, start the next interval; returns when the next sample is due."""
        self.samples.append((at, rss_bytes(self.pid), open_fds(self.pid)))
        if due:
            self.intervals.append(Interval())
        return due + self.interval


async def load(*, port: int, context: ssl.SSLContext, rate: float, seconds: float, shapes: int,
               soak: Soak, seed: int = 14) -> None:
    rng = random.Random(seed)
    pods, deployments = pod_shapes(shapes), deployment_shapes(shapes)
    kinds, weights = [kind for kind, _ in MIX], [weight for _, weight in MIX]
    pool: asyncio.Queue[tuple[loadgen.Connection, int]] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        pool.put_nowait((await loadgen.Connection.open("127.0.0.1", port, context), 0))
    clock = time.perf_counter
    start = clock() + 0.01
    soak.intervals.append(Interval())

    async def fresh() -> tuple[loadgen.Connection, int]:
        return await loadgen.Connection.open("127.0.0.1", port, context), 0

    async def one(due: float, kind: str, request: bytes) -> None:
        connection, used = await pool.get()
        bucket = soak.intervals[-1]
        soak.counts[kind] = soak.counts.get(kind, 0) + 1
        try:
            if kind == "drop":
                connection.writer.write(request)
                await connection.writer.drain()
                connection.close()
                pool.put_nowait(await fresh())
                return
            status, _ = await connection.post(request)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            bucket.failed += 1
            connection.close()
            pool.put_nowait(await fresh())
            return
        bucket.latencies.append(clock() - due)
        bucket.unexpected += status != EXPECTED[kind]
        if kind == "oversize" or used + 1 >= RECONNECT_EVERY:
            connection.close()
            pool.put_nowait(await fresh())
        else:
            pool.put_nowait((connection, used + 1))

    tasks: set[asyncio.Task[None]] = set()
    total = int(rate * seconds)
    next_sample = 0.0
    for i in range(total):
        due = start + i / rate
        if due - start >= next_sample:
            next_sample = soak.sample(due - start, next_sample)
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        kind = rng.choices(kinds, weights)[0]
        task = asyncio.create_task(one(due, kind, _request(kind, rng, pods=pods, deployments=deployments)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait()[0].close()
    await asyncio.sleep(0.5)
    soak.samples.append((clock() - start, rss_bytes(soak.pid), open_fds(soak.pid)))


def _request(kind: str, rng: random.Random, *, pods: list[bytes], deployments: list[bytes]) -> bytes:
    if kind in ("mutate", "drop"):
        return rng.choice(pods)
    if kind == "validate":
        return rng.choice(deployments)
    return rng.choice(MALFORMED) if kind == "malformed" else OVERSIZE


def report(soak: Soak, *, args: argparse.Namespace) -> tuple[str, bool]:
    mib = 1024 * 1024
    after = [s for s in soak.samples if s[0] >= args.warmup] or soak.samples[-1:]
    rss = [s[1] for s in after]
    spread = max(rss) - min(rss)
    growth = rss[-1] - rss[0]
    flat = spread <= FLAT_BYTES
    lines = [f"`python -m bench.soak --seconds {args.seconds:g} --rate {args.rate:g} --warmup {args.warmup:g} "
             f"--shapes {args.shapes}` (one worker on core {SERVER_CORE}, log level info; load on core "
             f"{CLIENT_CORE}; mix: {', '.join(f'{k} {w:.0%}' for k, w in MIX)}; reconnect every "
             f"{RECONNECT_EVERY} requests)", "",
             "| at s | RSS MiB | open fds | answers | p50 ms | p99 ms | unexpected status | failed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (at, rss_now, fds), bucket in zip(soak.samples[1:], soak.intervals, strict=False):
        data = sorted(bucket.latencies) or [float("nan")]
        p50, p99 = data[len(data) // 2], data[min(len(data) - 1, round(0.99 * (len(data) - 1)))]
        lines.append(f"| {at:.0f} | {rss_now / mib:.1f} | {fds} | {len(bucket.latencies)} | {p50 * 1e3:.2f} | "
                     f"{p99 * 1e3:.2f} | {bucket.unexpected} | {bucket.failed} |")
    unexpected = sum(b.unexpected for b in soak.intervals)
    failed = sum(b.failed for b in soak.intervals)
    all_latencies = sorted(x for b in soak.intervals for x in b.latencies)
    p99 = all_latencies[round(0.99 * (len(all_latencies) - 1))] * 1e3 if all_latencies else float("nan")
    lines += ["", f"Requests by kind: {', '.join(f'{k} {v:,}' for k, v in sorted(soak.counts.items()))}; "
              f"unexpected status {unexpected}, failed connections {failed}; p99 over the run {p99:.2f} ms "
              f"(median of interval p50s {statistics.median(_p50s(soak)):.2f} ms).",
              f"RSS after the {args.warmup:g} s warm-up: {rss[0] / mib:.1f} -> {rss[-1] / mib:.1f} MiB "
              f"(growth {growth / mib:+.1f} MiB), spread {spread / mib:.1f} MiB "
              f"(target: within {FLAT_BYTES / mib:.0f} MiB: {'met' if flat else 'NOT met'})."]
    return "\n".join(lines), flat and not unexpected


def _p50s(soak: Soak) -> list[float]:
    return [sorted(b.latencies)[len(b.latencies) // 2] * 1e3 for b in soak.intervals if b.latencies] or [0.0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--shapes", type=int, default=2000)
    args = parser.parse_args(argv)
    with contextlib.suppress(AttributeError, OSError, ValueError):  # the load keeps off the server's core
        os.sched_setaffinity(0, {int(CLIENT_CORE)})
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        pki: Pki = make_pki(workdir)
        port = free_port()
        argv_ = [sys.executable, "-m", "tls_injector", "serve", "--no-reconciler", "--host", "127.0.0.1", "--port",
                 str(port), "--tls-cert-file", str(pki.cert_file), "--tls-private-key-file", str(pki.key_file),
                 "--log-level", "info"]
        with (workdir / "serve.log").open("wb") as log:
            process = subprocess.Popen(pinned(argv_, SERVER_CORE), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            context = client_context(pki)
            _wait_ready(port, context, process)
            soak = Soak(pid=process.pid, interval=args.interval)
            loadgen.run(load(port=port, context=context, rate=args.rate, seconds=args.seconds,
                             shapes=args.shapes, soak=soak))
            alive = process.poll() is None
        finally:
            stop(process)
    text, ok = report(soak, args=args)
    print(text)
    if not alive:
        print("The server exited during the soak.")
    return 0 if ok and alive else 1


if __name__ == "__main__":
    raise SystemExit(main())
