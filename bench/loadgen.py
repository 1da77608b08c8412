"""A fixed-rate HTTPS load generator with latency measured from the scheduled send time.

Debian's wrk only runs closed loops (each connection sends as soon as its last answer arrives), which
hides queueing: when the server stalls, the generator stalls too and the slow requests are never sent
("coordinated omission"). Here request i is due at start + i / rate whatever happened before; its
latency runs from that due time to the last byte of the answer, so a stall shows up in every request
that should have been sent during it. Any lag of the generator itself is therefore counted against the
server, never in its favour; `send_lag` (due time to the moment a connection was free and the request
went out) reports how much of it there was, generator lag and queueing together.

Raw HTTP/1.1 over asyncio TLS streams (keep-alive, a pool of connections like the apiserver's client):
an HTTP client library would add its own per-request cost to the generator's core.
"""

from __future__ import annotations

import asyncio
import ssl
import statistics
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @classmethod
    async def open(cls, host: str, port: int, context: ssl.SSLContext) -> Connection:
        reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname="localhost")
        return cls(reader, writer)

    async def post(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def http_request(path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


@dataclass
class RateResult:
    rate: float
    sent: int
    ok: int
    failed: int
    latencies: list[float] = field(repr=False)
    send_lags: list[float] = field(repr=False)
    wall: float = 0.0

    def percentile(self, p: float, values: list[float] | None = None) -> float:
        data = sorted(self.latencies if values is None else values)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))]

    def summary(self) -> dict[str, float]:
        return {
            "target_rate": self.rate, "achieved_rate": self.ok / self.wall if self.wall else 0.0,
            "sent": self.sent, "ok": self.ok, "failed": self.failed,
            "p50_ms": self.percentile(50) * 1e3, "p99_ms": self.percentile(99) * 1e3,
            "max_ms": max(self.latencies, default=float("nan")) * 1e3,
            "mean_ms": statistics.fmean(self.latencies) * 1e3 if self.latencies else float("nan"),
            "send_lag_p99_ms": self.percentile(99, self.send_lags) * 1e3,
        }


async def fixed_rate(
    *, host: str, port: int, context: ssl.SSLContext, request: bytes, rate: float, duration: float,
    connections: int = 32,
) -> RateResult:
    """Send `rate * duration` requests at their due times over a pool of kept-alive connections."""
    clock = time.perf_counter  # uvloop's loop.time() only has millisecond resolution
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await Connection.open(host, port, context))
    total = int(rate * duration)
    result = RateResult(rate, total, 0, 0, [], [])
    start = clock() + 0.01

    async def one(due: float) -> None:
        connection = await pool.get()  # waiting for a free connection is queueing: it counts
        result.send_lags.append(clock() - due)
        try:
            status, _ = await connection.post(request)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            result.failed += 1
            connection = await Connection.open(host, port, context)
        else:
            result.latencies.append(clock() - due)
            result.ok += status == 200
            result.failed += status != 200
        pool.put_nowait(connection)

    tasks = []
    for i in range(total):
        due = start + i / rate
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    result.wall = clock() - start
    while not pool.empty():
        pool.get_nowait().close()
    return result


async def closed_loop(
    *, host: str, port: int, context: ssl.SSLContext, request: bytes, duration: float, connections: int = 16,
) -> tuple[int, int, float]:
    """The fallback saturation run when wrk is missing: (ok, failed, seconds), each connection busy."""
    counts = [0, 0]
    deadline = time.monotonic() + duration

    async def worker() -> None:
        connection = await Connection.open(host, port, context)
        while time.monotonic() < deadline:
            status, _ = await connection.post(request)
            counts[status != 200] += 1
        connection.close()

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return counts[0], counts[1], time.monotonic() - started


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop when present: the generator's own per-request cost is then smaller."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    result: T = uvloop.run(coroutine)
    return result
