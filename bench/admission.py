"""Admission over real HTTPS on loopback: tls-injector against a standard-library reference webhook.

Each server is a separate process pinned to core 0 (`taskset -c 0`), so "per core" is honest; the load
generators run on core 1. The servers get the same certificate, the same ~4.4 KB Pod CREATE review on
/mutate and ~8.4 KB Deployment UPDATE on /validate, over kept-alive HTTP/1.1 like the apiserver's.

Measured for each server and endpoint:
- saturation req/s: wrk (Debian's, installed with apt-get when missing), 16 connections, closed loop,
  three runs, the best kept (the median and each run are in the JSON);
- server CPU per request: utime+stime of the server process from /proc/<pid>/stat across a run,
  divided by the requests answered; the lowest of the three runs;
- p50/p99 latency at fixed 200 and 1000 req/s: bench.loadgen, timed from each request's due time;
- /validate against /mutate at the same body size: A/B rounds on the same server (SAME_SIZE_ROUNDS).
tls-injector runs twice, at the default --log-level info (one JSON line per admission call, written to
a file as a container runtime would collect it) and at warning, so the cost of the log line is visible.

    python -m bench admission [--seconds 10] [--quick]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.payloads import (
    deployment_update_review,
    encoded,
    pod_create_review,
    pod_create_review_sized_like_update,
    replica_stream,
    template_stream,
)

SERVER_CORE, CLIENT_CORE = "0", "1"
# Rows of the table: (path, review). The third compares /mutate with /validate at the same body size.
ENDPOINTS = {"mutate": ("/mutate", pod_create_review), "validate": ("/validate", deployment_update_review),
             "mutate, validate's size": ("/mutate", pod_create_review_sized_like_update)}
IN_PROCESS = ("mutate", "validate")
RATES = (200, 1000)
SATURATION_REPEATS = 3
# Targets from issue 8: 1.5x a Go net/http webhook (~4,700 req/s on one core of this machine kind).
TARGET_MUTATE_RPS = 1.5 * 4700
TARGET_CPU_US = 150
TARGET_P99_MS_AT_1000 = 5.0


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class ServerSpec:
    label: str
    argv: list[str]


def make_pki(directory: Path) -> Pki:
    from tls_injector.pki import issue_leaf, make_ca

    now = datetime.now(UTC)
    ca = make_ca(common_name="bench CA", now=now)
    leaf = issue_leaf(issuer=ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=now)
    pki = Pki(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    pki.ca_file.write_bytes(ca.cert_pem)
    pki.cert_file.write_bytes(leaf.cert_pem)
    pki.key_file.write_bytes(leaf.key_pem)
    return pki


def server_specs(pki: Pki, port: int) -> list[ServerSpec]:
    common = ["--host", "127.0.0.1", "--port", str(port)]
    ours = [sys.executable, "-m", "tls_injector", "serve", *common, "--tls-cert-file", str(pki.cert_file),
            "--tls-private-key-file", str(pki.key_file)]
    reference = [sys.executable, "-m", "bench.reference_webhook", *common, "--cert", str(pki.cert_file),
                 "--key", str(pki.key_file)]
    return [ServerSpec("tls-injector (log info)", [*ours, "--log-level", "info"]),
            ServerSpec("tls-injector (log warning)", [*ours, "--log-level", "warning"]),
            ServerSpec("stdlib reference", reference)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pinned(argv: list[str], core: str) -> list[str]:
    return ["taskset", "-c", core, *argv] if shutil.which("taskset") else argv


@contextlib.contextmanager
def serving(spec: ServerSpec, *, port: int, context: ssl.SSLContext, log: Path) -> Iterator[int]:
    """Start the server pinned to its core, wait until it answers over TLS, yield its pid, stop it."""
    with log.open("wb") as stderr:
        process = subprocess.Popen(pinned(spec.argv, SERVER_CORE), stdout=subprocess.DEVNULL, stderr=stderr,
                                   cwd=Path(__file__).resolve().parents[1])
        try:
            _wait_ready(port, context, process)
            yield process.pid
        finally:
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server drains), then SIGKILL if it is still there after 30 s."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_ready(port: int, context: ssl.SSLContext, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before answering")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                    context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            if tls.recv(64).startswith(b"HTTP/1.1 200"):
                return
        time.sleep(0.1)
    raise RuntimeError("server did not become ready in 30 s")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample_verdict(port: int, context: ssl.SSLContext, path: str, body: bytes) -> str:
    """What the server answered one request with, so a table row says which work it measured."""
    async def ask() -> tuple[int, bytes]:
        connection = await loadgen.Connection.open("127.0.0.1", port, context)
        try:
            return await connection.post(loadgen.http_request(path, body))
        finally:
            connection.close()

    status, raw = loadgen.run(ask())
    if status != 200:
        return f"HTTP {status}"
    response: dict[str, Any] = json.loads(raw)["response"]
    if "patch" in response:
        return f"patched ({len(json.loads(base64.b64decode(response['patch'])))} ops)"
    return "allowed" if response["allowed"] else "denied"


def ensure_wrk() -> str | None:
    """wrk from Debian; installed with apt-get (as root) when missing. None when it cannot be had."""
    if shutil.which("wrk"):
        return shutil.which("wrk")
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench: wrk missing, installing it with apt-get", file=sys.stderr)
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return shutil.which("wrk")


# The bodies file holds one review per line (compact JSON has no newline); wrk sends them in turn, each
# request formatted once at start, so a stream of distinct reviews costs the load generator no more.
WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local requests, n, i = {}, 0, 0
init = function(args)
  for line in io.lines(os.getenv("BENCH_BODY")) do
    n = n + 1
    requests[n] = wrk.format(nil, nil, nil, line)
  end
end
request = function()
  i = i % n + 1
  return requests[i]
end
"""


def saturate(*, wrk: str | None, port: int, context: ssl.SSLContext, path: str, body_file: Path,
             seconds: float) -> tuple[int, int, float, str]:
    """(answered, non-200 or errors, seconds, tool) at saturation."""
    if wrk is None:
        request = loadgen.http_request(path, body_file.read_bytes())
        ok, failed, wall = loadgen.run(loadgen.closed_loop(
            host="127.0.0.1", port=port, context=context, request=request, duration=seconds))
        return ok + failed, failed, wall, "python closed loop (wrk missing)"
    script = body_file.with_suffix(".lua")
    script.write_text(WRK_SCRIPT)
    duration = f"-d{round(seconds)}s"  # wrk takes whole seconds
    argv = pinned([wrk, "-t1", "-c16", duration, "-s", str(script), f"https://127.0.0.1:{port}{path}"], CLIENT_CORE)
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env={**os.environ,
                         "BENCH_BODY": str(body_file)}).stdout
    total = int(re.search(r"(\d+) requests in ([\d.]+)(\w+)", out).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    errors += sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    return total, errors, seconds, "wrk -t1 -c16"


def measure_endpoint(*, pid: int, port: int, context: ssl.SSLContext, wrk: str | None, endpoint: str,
                     workdir: Path, seconds: float) -> dict[str, Any]:
    path, review = ENDPOINTS[endpoint]
    body = encoded(review())
    path += "?timeout=10s"
    body_file = workdir / f"{endpoint}.json"
    body_file.write_bytes(body)
    row: dict[str, Any] = {"endpoint": endpoint, "body_bytes": len(body),
                           "verdict": sample_verdict(port, context, path, body)}
    saturate(wrk=wrk, port=port, context=context, path=path, body_file=body_file, seconds=min(2.0, seconds))  # warm
    runs = []
    for _ in range(SATURATION_REPEATS):
        cpu_before = cpu_seconds(pid)
        total, errors, wall, tool = saturate(wrk=wrk, port=port, context=context, path=path, body_file=body_file,
                                             seconds=max(1, round(seconds / 2)))
        runs.append((total / wall, (cpu_seconds(pid) - cpu_before) / total * 1e6, errors))
    # Other work on the machine only ever slows a run down: the best of the repeats is the least disturbed.
    row.update(saturation_rps=max(r[0] for r in runs), cpu_us_per_request=min(r[1] for r in runs),
               saturation_errors=sum(r[2] for r in runs), saturation_runs=runs, tool=tool)
    for rate in RATES:
        row[f"at_{rate}"] = fixed_rate_run(pid=pid, port=port, context=context, path=path, body=body, rate=rate,
                                           seconds=seconds)
    return row


def fixed_rate_run(*, pid: int, port: int, context: ssl.SSLContext, path: str, body: bytes, rate: int,
                   seconds: float) -> dict[str, float]:
    cpu_before = cpu_seconds(pid)
    result = loadgen.run(loadgen.fixed_rate(host="127.0.0.1", port=port, context=context,
                                            request=loadgen.http_request(path, body), rate=rate,
                                            duration=seconds))
    summary = result.summary()
    summary["cpu_us_per_request"] = (cpu_seconds(pid) - cpu_before) / max(1, summary["ok"]) * 1e6
    return summary


# The Go reference webhook (net/http, TLS, keep-alive; the same injection): a binary taking
# `<host:port> <cert> <key>` and serving POST /mutate and GET /healthz, named by this variable.
GO_REFERENCE_ENV = "TLS_INJECTOR_GO_REFERENCE"
# What the head to head sends. Every review the apiserver sends differs from the last at least in its uid
# and the pod's token volume name, so no stream repeats one review; the two streams bound what a cluster
# sends, from a rollout (replicas of one template) to pods that each come from a template of their own.
STREAMS = {"replicas": replica_stream, "new templates": template_stream}
STREAM_NOTES = {"replicas": "the pods of one ReplicaSet, each with its own uid and token volume name "
                            "(a rollout or scale-up)",
                "new templates": "every pod from a different template, so nothing can be remembered between "
                                 "reviews (the worst case for tls-injector; the Go reference does the same "
                                 "work for both)"}
# Throughput goals against the Go reference per stream (issue 26): replicas keep 1.5x; a new template every
# review 1.25x for now, 1.5x the next goal.
STREAM_TARGETS = {"replicas": 1.5, "new templates": 1.25}
STREAM_LENGTH = 2000  # more than the 512 answers /mutate remembers, so "new templates" never finds one
# A/B rounds: in each, both servers run the same wrk load back to back (which goes first alternates), and
# the round's figure is their ratio. This machine shares its host: either server alone varied by a quarter
# between rounds a few seconds apart (Go: 204-378 us a review in one run, the same work each time), far
# more than the margins measured. Whatever slows the machine for a while slows both runs of a round alike,
# so the ratio within a round cancels most of it; the median of the rounds' ratios is the figure quoted,
# and nine rounds keep one disturbed round from moving it. Each server's median alone is shown too.
AB_ROUNDS = 9
ATTACK_IDLE, ATTACK_TRICKLE, ATTACK_RATE = 500, 50, 200


def go_reference() -> tuple[str | None, str]:
    """(binary, why not) for the Go reference row."""
    binary = os.environ.get(GO_REFERENCE_ENV)
    if not binary:
        return None, f"{GO_REFERENCE_ENV} not set: no Go reference row"
    if not os.access(binary, os.X_OK):
        return None, f"{GO_REFERENCE_ENV} is not an executable: no Go reference row"
    return binary, f"from {GO_REFERENCE_ENV}"


def head_to_head(*, pki: Pki, context: ssl.SSLContext, wrk: str | None, workdir: Path,
                 seconds: float) -> dict[str, Any]:
    """tls-injector (log info) against the Go reference on /mutate: A/B rounds of the same wrk run,
    alternating which goes first, each server pinned to the same core; the median of the rounds' ratios
    (see AB_ROUNDS). Then /mutate at a fixed 200 req/s while bench.attack holds 500 idle and 50 slowloris
    connections against the same server."""
    binary, why = go_reference()
    body = replica_stream(1)[0]
    bodies: dict[str, Path] = {}
    for stream, reviews in STREAMS.items():
        bodies[stream] = workdir / f"h2h-{len(bodies)}.jsonl"
        bodies[stream].write_bytes(b"\n".join(reviews(STREAM_LENGTH)) + b"\n")
    ours_port, go_port = free_port(), free_port()
    specs = [ServerSpec("tls-injector", [sys.executable, "-m", "tls_injector", "serve", "--host", "127.0.0.1", "--port",
                                        str(ours_port), "--tls-cert-file", str(pki.cert_file),
                                        "--tls-private-key-file", str(pki.key_file), "--log-level", "info"])]
    if binary:
        specs.append(ServerSpec("Go net/http reference",
                                [binary, f"127.0.0.1:{go_port}", str(pki.cert_file), str(pki.key_file)]))
    ports = {"tls-injector": ours_port, "Go net/http reference": go_port}
    out: dict[str, Any] = {"go_reference": why, "rounds": AB_ROUNDS, "servers": {}}
    with contextlib.ExitStack() as stack:
        pids = {spec.label: stack.enter_context(serving(spec, port=ports[spec.label], context=context,
                                                        log=workdir / f"h2h-{spec.label[:6]}.log"))
                for spec in specs}
        for label in pids:
            out["servers"][label] = {"verdict": sample_verdict(ports[label], context, "/mutate", body),
                                     "streams": {}}
        for stream, body_file in bodies.items():
            runs: dict[str, list[tuple[float, float]]] = {label: [] for label in pids}
            for label in pids:
                saturate(wrk=wrk, port=ports[label], context=context, path="/mutate", body_file=body_file,
                         seconds=2.0)  # warm
            for round_ in range(AB_ROUNDS):
                order = list(pids) if round_ % 2 == 0 else list(reversed(pids))
                for label in order:
                    before = cpu_seconds(pids[label])
                    total, errors, wall, _ = saturate(wrk=wrk, port=ports[label], context=context, path="/mutate",
                                                      body_file=body_file, seconds=max(1, round(seconds / 2)))
                    if errors:
                        raise RuntimeError(f"{label}: {errors} failed requests on {stream}")
                    runs[label].append((total / wall, (cpu_seconds(pids[label]) - before) / total * 1e6))
            for label in pids:
                out["servers"][label]["streams"][stream] = {
                    "rps_median": statistics.median(r[0] for r in runs[label]),
                    "cpu_us_median": statistics.median(r[1] for r in runs[label]), "runs": runs[label]}
            if binary:
                ours, go = runs["tls-injector"], runs["Go net/http reference"]
                rounds = [{"rps": a[0] / b[0], "cpu": a[1] / b[1]} for a, b in zip(ours, go, strict=True)]
                out.setdefault("ratios", {})[stream] = {
                    "rps": statistics.median(r["rps"] for r in rounds),
                    "cpu": statistics.median(r["cpu"] for r in rounds),
                    "rps_of_medians": statistics.median(r[0] for r in ours) / statistics.median(r[0] for r in go),
                    "rounds": rounds}
        for label, pid in pids.items():
            out["servers"][label]["under_attack"] = under_attack(pid=pid, port=ports[label], context=context,
                                                                 body=body, seconds=seconds)
    out["load_average"] = os.getloadavg()
    return out


def under_attack(*, pid: int, port: int, context: ssl.SSLContext, body: bytes, seconds: float) -> dict[str, Any]:
    attacker = subprocess.Popen(pinned([sys.executable, "-m", "bench.attack", "--port", str(port), "--idle",
                                        str(ATTACK_IDLE), "--trickle", str(ATTACK_TRICKLE)], CLIENT_CORE),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                cwd=Path(__file__).resolve().parents[1])
    try:
        time.sleep(3)  # the attack's connections are open (handshakes done) before measuring
        summary: dict[str, Any] = dict(fixed_rate_run(pid=pid, port=port, context=context,
                                                      path="/mutate?timeout=10s", body=body, rate=ATTACK_RATE,
                                                      seconds=seconds))
    finally:
        attacker.terminate()
        tally, _ = attacker.communicate(timeout=30)
    summary["attacker"] = tally.strip()
    return summary


def head_to_head_markdown(h2h: dict[str, Any]) -> list[str]:
    load = " ".join(f"{x:.2f}" for x in h2h["load_average"])
    lines = [f"Head to head on /mutate ({h2h['rounds']} A/B rounds of `wrk -t1 -c16` per stream, alternating "
             f"order; the ratio is the median of the rounds' ratios, each server's figures its medians; load "
             f"average {load}). Go reference: "
             f"{h2h['go_reference']}. Streams of {STREAM_LENGTH:,} reviews, sent in turn: " + "; ".join(
                 f"*{name}*: {text}" for name, text in STREAM_NOTES.items()) + ".", "",
             "| server | answer | stream | req/s (median) | CPU us/req (median) |", "| --- | --- | --- | --- | --- |"]
    for label, row in h2h["servers"].items():
        for stream, figures in row["streams"].items():
            lines.append(f"| {label} | {row['verdict']} | {stream} | {figures['rps_median']:,.0f} | "
                         f"{figures['cpu_us_median']:.0f} |")
    lines += ["", "| server | under attack: p50 / p99 ms @200 req/s | failed | attacker |", "| --- | --- | --- | --- |"]
    for label, row in h2h["servers"].items():
        attack = row["under_attack"]
        lines.append(f"| {label} | {attack['p50_ms']:.2f} / {attack['p99_ms']:.2f} | {attack['failed']} | "
                     f"{attack['attacker']} |")
    for stream, ratio in h2h.get("ratios", {}).items():
        target = STREAM_TARGETS.get(stream, 1.5)
        verdict = "met" if ratio["rps"] >= target else "NOT met"
        each = ", ".join(f"{r['rps']:.2f}" for r in ratio["rounds"])
        lines += ["", f"tls-injector / Go on *{stream}*: throughput **{ratio['rps']:.2f}x**, CPU per request "
                      f"{ratio['cpu']:.2f}x (target: throughput >= {target}x: {verdict}). Rounds: {each}; "
                      f"the ratio of the two servers' medians: {ratio['rps_of_medians']:.2f}x."]
    return lines


def client_context(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_file))


def run(seconds: float = 10.0) -> dict[str, Any]:
    """Every server, every endpoint; returns the results as plain data (also printed as they come)."""
    wrk = ensure_wrk()
    original = os.sched_getaffinity(0)
    with contextlib.suppress(OSError, ValueError):
        os.sched_setaffinity(0, {int(CLIENT_CORE)})  # the Python generator shares the client core with wrk
    try:
        with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
            workdir = Path(tmp)
            pki = make_pki(workdir)
            context = client_context(pki)
            h2h = head_to_head(pki=pki, context=context, wrk=wrk, workdir=workdir, seconds=seconds)
            servers = [run_server(spec, port=port, pki=pki, context=context, wrk=wrk, workdir=workdir,
                                  seconds=seconds)
                       for port in [free_port()] for spec in server_specs(pki, port)]
            in_process = app_path(workdir)
            line = log_line_us(workdir / "log-line.log")
    finally:
        os.sched_setaffinity(0, original)
    return {"seconds_per_run": seconds, "wrk": wrk or "missing", "servers": servers, "app_path_us": in_process,
            "log_line": line, "head_to_head": h2h}


def run_server(spec: ServerSpec, *, port: int, pki: Pki, context: ssl.SSLContext, wrk: str | None,
               workdir: Path, seconds: float) -> dict[str, Any]:
    slug = re.sub(r"\W+", "-", spec.label)
    log = workdir / f"{slug}.log"
    with serving(spec, port=port, context=context, log=log) as pid:
        rows = []
        for endpoint in ENDPOINTS:
            row = measure_endpoint(pid=pid, port=port, context=context, wrk=wrk, endpoint=endpoint,
                                   workdir=workdir, seconds=seconds)
            print(f"  {spec.label:28} {endpoint:8} {row['saturation_rps']:8.0f} req/s "
                  f"{row['cpu_us_per_request']:6.0f} us/req  p99@1000 {row['at_1000']['p99_ms']:.2f} ms",
                  file=sys.stderr, flush=True)
            rows.append(row)
        paired = (same_size_rounds(port=port, context=context, wrk=wrk, workdir=workdir, seconds=seconds)
                  if spec.label.startswith("tls-injector") else None)
    tracebacks = log.read_text(errors="replace").count("Traceback")
    return {"server": spec.label, "endpoints": rows, "log_bytes": log.stat().st_size, "tracebacks": tracebacks,
            "same_size_rounds": paired}


# /validate against /mutate at the same body size, on one server: A/B rounds as in the head to head (see
# AB_ROUNDS), the two endpoints' runs back to back in each round, the median of the rounds' ratios.
SAME_SIZE = ("validate", "mutate, validate's size")
SAME_SIZE_ROUNDS = 7


def same_size_rounds(*, port: int, context: ssl.SSLContext, wrk: str | None, workdir: Path,
                     seconds: float) -> dict[str, Any]:
    """Throughput of /validate over /mutate's at the same body size (the body files measure_endpoint wrote)."""
    ratios_ = []
    for round_ in range(SAME_SIZE_ROUNDS):
        rps = {}
        for endpoint in SAME_SIZE if round_ % 2 == 0 else reversed(SAME_SIZE):
            total, _, wall, _ = saturate(wrk=wrk, port=port, context=context,
                                         path=f"{ENDPOINTS[endpoint][0]}?timeout=10s",
                                         body_file=workdir / f"{endpoint}.json", seconds=max(1, round(seconds / 2)))
            rps[endpoint] = total / wall
        ratios_.append(rps[SAME_SIZE[0]] / rps[SAME_SIZE[1]])
    return {"rounds": ratios_, "ratio": statistics.median(ratios_)}


def app_path_us(endpoint: str, *, level: str, log_file: Path, n: int = 3000) -> float:
    """CPU of the endpoint alone per request (no TLS, no HTTP parsing), from this thread's CPU clock.

    The thread's CPU clock does not count time spent preempted, so this figure holds on a busy machine
    where the end-to-end ones do not; it isolates what the endpoint adds, logging included or not.
    """
    import logging

    from tls_injector.cli import build_handlers
    from tls_injector.logs import configure_logging, flush_access_lines
    from tls_injector.settings import ServeSettings
    from tls_injector.web.endpoints import AdmissionEndpoint
    from tls_injector.web.metrics import ServerMetrics

    configure_logging(level)
    handler = logging.getLogger().handlers[0]
    # The access log writes to sys.stderr itself (tls_injector.logs.AccessLog); other records go through logging.
    with log_file.open("w") as stream, contextlib.redirect_stderr(stream):
        handler.stream = stream  # type: ignore[attr-defined]
        mutate, validate = build_handlers(ServeSettings())
        target = AdmissionEndpoint(name=endpoint, route=mutate if endpoint == "mutate" else validate,
                                   metrics=ServerMetrics())
        body = encoded(ENDPOINTS[endpoint][1]())
        try:
            for _ in range(200):  # warm: first calls fill caches and compile the rules
                assert target.answer(b"POST", b"application/json", body)[0] == 200
            started = time.thread_time()
            for _ in range(n):
                target.answer(b"POST", b"application/json", body)
            return (time.thread_time() - started) / n * 1e6
        finally:
            flush_access_lines()  # into this file: the batch's last lines were written to the console at exit
            logging.getLogger().handlers.clear()


LOG_LINE_TARGET_US = 3.0


def log_line_us(log_file: Path, *, calls: int = 20_000, rounds: int = 9) -> dict[str, float]:
    """The access log line alone (issue 14: <= 3 us): one /mutate call's fields through AccessLog.info into
    its batch, the batches written to a file. Each round times that loop and the same loop without the
    call (the endpoint builds the fields at any level) on this thread's CPU clock; the median of the
    rounds' differences is the line's cost."""
    import statistics

    from tls_injector.logs import AccessBatch, AccessLog

    def fields() -> dict[str, object]:
        return {"endpoint": "mutate", "uid": "b2f6c1a0-5d3e-4c7a-9e1f-0a1b2c3d4e5f", "kind": "Pod",
                "namespace": "team-a", "object_name": "web-7d4b9c8f6d-x2x9q", "operation": "CREATE",
                "dry_run": False, "verdict": "patched", "latency_ms": 0.071}

    with log_file.open("w") as stream:
        access = AccessLog("tls_injector.admission", batch=AccessBatch(lambda: stream))
        access.enabled = True
        with_line, without, differences = [], [], []
        for _ in range(rounds):
            started = time.thread_time()
            for _ in range(calls):
                access.info("admission", fields())
            with_line.append((time.thread_time() - started) / calls * 1e6)
            started = time.thread_time()
            for _ in range(calls):
                fields()
            without.append((time.thread_time() - started) / calls * 1e6)
            differences.append(with_line[-1] - without[-1])
    return {"line_us": statistics.median(differences), "loop_with_us": statistics.median(with_line),
            "loop_without_us": statistics.median(without), "bytes_per_line": log_file.stat().st_size / (calls * rounds)}


def app_path(workdir: Path, rounds: int = 5) -> dict[str, dict[str, float]]:
    """Per endpoint and log level, the median of `rounds` runs, the levels alternating."""
    import statistics

    runs: dict[str, dict[str, list[float]]] = {e: {"info": [], "warning": []} for e in IN_PROCESS}
    for _ in range(rounds):
        for endpoint in IN_PROCESS:
            for level in ("info", "warning"):
                runs[endpoint][level].append(app_path_us(endpoint, level=level, log_file=workdir / f"app-{level}.log"))
    return {e: {level: statistics.median(values) for level, values in levels.items()} for e, levels in runs.items()}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets against the default configuration (log level info), and at warning."""
    checks = []
    for server in results["servers"]:
        if not server["server"].startswith("tls-injector"):
            continue
        mutate = next(r for r in server["endpoints"] if r["endpoint"] == "mutate")
        for name, measured, target, ok in (
            ("mutate throughput, req/s on one core", mutate["saturation_rps"], f">= {TARGET_MUTATE_RPS:.0f}",
             mutate["saturation_rps"] >= TARGET_MUTATE_RPS),
            ("server CPU per mutate, us", mutate["cpu_us_per_request"], f"<= {TARGET_CPU_US}",
             mutate["cpu_us_per_request"] <= TARGET_CPU_US),
            ("mutate p99 at 1000 req/s, ms", mutate["at_1000"]["p99_ms"], f"<= {TARGET_P99_MS_AT_1000}",
             mutate["at_1000"]["p99_ms"] <= TARGET_P99_MS_AT_1000 and mutate["at_1000"]["failed"] == 0),
        ):
            checks.append({"server": server["server"], "target": name, "measured": measured, "wanted": target,
                           "met": ok})
    return checks


def ratios(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """tls-injector / reference, per server configuration and endpoint (throughput and CPU)."""
    by_label = {s["server"]: {r["endpoint"]: r for r in s["endpoints"]} for s in results["servers"]}
    reference = by_label.get("stdlib reference", {})
    out: dict[str, dict[str, float]] = {}
    for label, rows in by_label.items():
        if label == "stdlib reference":
            continue
        for endpoint, row in rows.items():
            ref = reference.get(endpoint)
            if ref:
                out[f"{label} {endpoint}"] = {
                    "throughput_x": row["saturation_rps"] / ref["saturation_rps"],
                    "cpu_x": row["cpu_us_per_request"] / ref["cpu_us_per_request"],
                }
    return out


def logging_cost(results: dict[str, Any]) -> list[str]:
    """What the one JSON log line per admission call costs: info minus warning, per endpoint."""
    by_label = {s["server"]: {r["endpoint"]: r for r in s["endpoints"]} for s in results["servers"]}
    info, warning = by_label.get("tls-injector (log info)"), by_label.get("tls-injector (log warning)")
    if not info or not warning:
        return []
    lines = []
    line = results.get("log_line")
    if line:
        met = "met" if line["line_us"] <= LOG_LINE_TARGET_US else "NOT met"
        lines.append(f"- The access log line alone (AccessLog.info into its batch, {line['bytes_per_line']:.0f} "
                     "bytes a line, batches written to a file; median of rounds, thread CPU clock): "
                     f"**{line['line_us']:.2f} us** (target <= {LOG_LINE_TARGET_US:.0f} us: {met}).")
    for endpoint, levels in results.get("app_path_us", {}).items():
        lines.append(f"- The endpoint alone on {endpoint} (in process, thread CPU clock, no TLS/HTTP, median of 5): "
                     f"{levels['info']:.0f} us at log level info, {levels['warning']:.0f} us at warning: the log "
                     f"line costs {levels['info'] - levels['warning']:.0f} us.")
    for endpoint in ENDPOINTS:
        cost = info[endpoint]["cpu_us_per_request"] - warning[endpoint]["cpu_us_per_request"]
        share = cost / info[endpoint]["cpu_us_per_request"] * 100
        lines.append(f"- Logging at info (one JSON line per call) on {endpoint}: {cost:+.0f} us of server CPU per "
                     f"request at saturation ({share:+.0f}% of the request); throughput "
                     f"{info[endpoint]['saturation_rps']:,.0f} vs {warning[endpoint]['saturation_rps']:,.0f} req/s.")
    return lines


def same_size(results: dict[str, Any]) -> list[str]:
    """Issue 14: /validate as fast as /mutate for the same body size, per tls-injector configuration."""
    lines = []
    for server in results["servers"]:
        rows = {r["endpoint"]: r for r in server["endpoints"]}
        if not server["server"].startswith("tls-injector") or "mutate, validate's size" not in rows:
            continue
        validate, mutate = rows["validate"], rows["mutate, validate's size"]
        paired = server.get("same_size_rounds") or {"rounds": [], "ratio": float("nan")}
        each = ", ".join(f"{r:.2f}" for r in paired["rounds"])
        lines.append(f"- {server['server']}, same body size ({validate['body_bytes']} B): /validate at "
                     f"**{paired['ratio']:.2f}x** /mutate's throughput (median of {len(paired['rounds'])} A/B "
                     f"rounds: {each}). In the table's best runs: /validate {validate['saturation_rps']:,.0f} req/s "
                     f"at {validate['cpu_us_per_request']:.0f} us, /mutate {mutate['saturation_rps']:,.0f} req/s at "
                     f"{mutate['cpu_us_per_request']:.0f} us.")
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = [*head_to_head_markdown(results["head_to_head"]), "",
             "| server | endpoint | body | answer | saturation req/s (best of 3) | CPU us/req (sat., best) | "
             "p50 / p99 ms @200 | p50 / p99 ms @1000 | CPU us/req @1000 | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for server in results["servers"]:
        for r in server["endpoints"]:
            low, high = r["at_200"], r["at_1000"]
            errors = r["saturation_errors"] + low["failed"] + high["failed"]
            lines.append(
                f"| {server['server']} | {r['endpoint']} | {r['body_bytes']} B | {r['verdict']} | "
                f"{r['saturation_rps']:,.0f} | {r['cpu_us_per_request']:.0f} | "
                f"{low['p50_ms']:.2f} / {low['p99_ms']:.2f} | {high['p50_ms']:.2f} / {high['p99_ms']:.2f} | "
                f"{high['cpu_us_per_request']:.0f} | {errors} |")
    lines += ["", "| ours / reference | throughput | CPU per request |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v['throughput_x']:.2f}x | {v['cpu_x']:.2f}x |" for k, v in ratios(results).items()]
    lines += ["", *same_size(results), *logging_cost(results)]
    lines += ["", "| target (issue 8) | server | measured | wanted | met |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {c['target']} | {c['server']} | {c['measured']:,.1f} | {c['wanted']} | "
              f"{'yes' if c['met'] else '**no**'} |" for c in targets(results)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench admission", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured run")
    parser.add_argument("--quick", action="store_true", help="2 s runs: a smoke test, no numbers to quote")
    args = parser.parse_args(argv)
    results = run(seconds=2.0 if args.quick else args.seconds)
    results["markdown"] = markdown(results)
    results["targets"] = targets(results)
    results["ratios"] = ratios(results)
    print(results["markdown"])
    return results


if __name__ == "__main__":
    main()
