"""Clients that queue requests and never read the answers, against a real `serve` process: its RSS and
its probes while they do.

    python -m bench.unread --port operator [--connections 64] [--seconds 10]
    python -m bench.unread --port admission [--connections 250] [--seconds 10]

`operator`: the plain-HTTP operator port (`--probe-port`, 8081 in the Deployment; the reconciler's 8080
is the same module), each connection writing pipelined `GET /metrics` as fast as the server takes them (and connecting
again when the server closes it).
`admission`: the HTTPS admission port, each connection (TLS, from one address) writing pipelined
`POST /mutate` reviews of the bench's pod. No connection ever reads. Meanwhile /healthz is asked on the
operator port every 0.25 s with the Deployment's probe timeout (2 s). Prints the server's RSS before
and at its peak, and how many probes were answered in time.

Bounded: the attack stops after `--seconds`, or as soon as the server's RSS has grown by `--growth-cap-mib`
(this machine is shared; the server's memory growing without bound is then the finding).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.support.certs import write_serving_pair
from tests.support.process import free_port, serve_process
from tests.support.unread import HEALTHZ, attack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", choices=("operator", "admission"), default="operator")
    parser.add_argument("--connections", type=int, default=0, help="default: 64 operator, 250 admission")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--growth-cap-mib", type=int, default=1500)
    parser.add_argument("--sources", type=int, default=1, help="loopback addresses the connections come from")
    parser.add_argument("--healthz", action="store_true",
                        help="pipeline GET /healthz, the smallest request, instead (the most requests per byte)")
    args = parser.parse_args()
    connections = args.connections or (64 if args.port == "operator" else 250)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_serving_pair(Path(tmp) / "certs")
        probe_port = free_port()
        with serve_process(Path(tmp), files, "--probe-port", str(probe_port), "--no-reconciler",
                           "--log-level", "warning") as server:
            outcome = attack(server, probe_port, target=args.port, connections=connections,
                             seconds=args.seconds, growth_cap=args.growth_cap_mib * 2**20,
                             requests=HEALTHZ * 512 if args.healthz else b"", sources=args.sources)
    print(outcome.summary(f"{args.port} port, {args.seconds:.0f} s"))


if __name__ == "__main__":
    main()
