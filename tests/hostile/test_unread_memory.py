"""Clients that queue requests and never read the answers, against a real `serve` process: the process's
RSS stays within what its limits allow, and the probes are answered throughout (tests.support.unread;
`python -m bench.unread` runs the same attack longer and prints the figures docs/serving.md quotes)."""

from __future__ import annotations

from pathlib import Path

from tests.support.certs import write_serving_pair
from tests.support.process import free_port, serve_process
from tests.support.unread import HEALTHZ, attack

MIB = 2**20


def test_the_operator_port_holds_its_memory_and_answers_probes_while_64_clients_pipeline_unread(
    tmp_path: Path,
) -> None:
    """64 connections (the port's cap), each writing pipelined `GET /metrics` and reading nothing, and
    connecting again when closed. Before the bounds, uvicorn queued every request it read: the process
    grew by ~500 MiB in 10 s (toward 2 GB) and no probe was answered. Now each connection may queue four
    requests behind the one answered and 64 KiB of answers: 64 connections hold a few MiB."""
    files = write_serving_pair(tmp_path / "certs")
    probe_port = free_port()
    with serve_process(tmp_path, files, "--probe-port", str(probe_port), "--no-reconciler",
                       "--log-level", "warning") as server:
        outcome = attack(server, probe_port, target="operator", connections=64, seconds=4.0,
                         growth_cap=256 * MIB)
    assert outcome.connected >= 64
    assert outcome.growth < 32 * MIB, outcome.summary("operator port")
    assert outcome.probes
    assert outcome.unanswered_in_a_row() < 2, outcome.summary("operator port")


def test_one_source_at_its_connection_cap_pipelining_unread_stays_far_inside_the_memory_limit(tmp_path: Path) -> None:
    """250 connections (the per-source cap) from one address, each pipelining `GET /healthz` (the most
    requests per byte) over TLS and reading nothing. Before the admission port bounded what a connection
    holds, the process grew by ~185 MiB in 8 s (264 MiB, over the Deployment's 256 MiB limit) and on toward
    ~1 MiB a connection; now a connection holds ~16 KiB of requests read ahead, 16 KiB of unsent answers and
    what uvloop and OpenSSL keep (docs/serving.md, "Memory"): the growth stays under 96 MiB, so with the
    ~80 MiB the process starts at it stays far below the limit."""
    files = write_serving_pair(tmp_path / "certs")
    probe_port = free_port()
    with serve_process(tmp_path, files, "--probe-port", str(probe_port), "--no-reconciler",
                       "--log-level", "warning") as server:
        outcome = attack(server, probe_port, target="admission", connections=250, seconds=6.0,
                         growth_cap=160 * MIB, requests=HEALTHZ * 512)
    assert outcome.connected >= 250
    assert outcome.growth < 96 * MIB, outcome.summary("admission port")
    assert outcome.probes
    assert outcome.unanswered_in_a_row() < 2, outcome.summary("admission port")
