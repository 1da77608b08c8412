"""Run the emulator as its own process, for benchmarks of the CLI against it.

    python -m tests.kubeapi [--port 0] [--kubeconfig FILE] [--history N] [--seed S] [--certificates v1]

Prints the server URL as the first line of stdout once it is serving, then serves until SIGTERM or
SIGINT. Seed objects, read counters and inject faults through the control endpoints (control.py).
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from tests.kubeapi import running_emulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kubeapi", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the server here")
    parser.add_argument("--history", type=int, default=10_000, help="watch events retained (older: 410)")
    parser.add_argument("--seed", type=int, default=None, help="seed for uids and generated names")
    parser.add_argument("--certificates", default="", help="certificates.k8s.io versions serving pod certificates "
                        "and ClusterTrustBundles, comma-separated (v1, v1beta1); none by default")
    args = parser.parse_args(argv)
    versions = tuple(v.strip() for v in args.certificates.split(",") if v.strip())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with running_emulator(host=args.host, port=args.port, history=args.history, seed=args.seed,
                          certificates=versions) as api:
        if args.kubeconfig:
            api.write_kubeconfig(args.kubeconfig)
        print(api.url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
