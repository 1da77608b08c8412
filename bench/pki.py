"""PKI throughput: leaves issued per second per key type, renewal decisions, bundles, keystores.

    python -m bench.pki [--scale 1.0]

Each row runs the operation `n` times (scaled) after one warm-up and prints the median of 5 rounds, so
one noisy round on a shared machine does not move the figure. Wall time and this process's CPU time
are both shown: on a busy machine the CPU column is the one that compares between runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from tls_injector.pki import (
    CertKey,
    KeyType,
    dns_names_for_services,
    issue_leaf,
    leaf_renewal,
    make_ca,
    to_pkcs12,
    trust_bundle,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)
NAMES = dns_names_for_services(["web"], "shop")  # the 4 SANs of one Service
ROUNDS = 5


def _median_seconds(op: Callable[[], object], n: int) -> tuple[float, float]:
    """(wall, cpu) seconds per operation, each the median over ROUNDS rounds of `n` calls."""
    op()  # warm-up: first-call costs (imports, OpenSSL tables) are not what a reconciler pays each time
    wall, cpu = [], []
    for _ in range(ROUNDS):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            op()
        wall.append((time.perf_counter() - start) / n)
        cpu.append((time.process_time() - start_cpu) / n)
    return statistics.median(wall), statistics.median(cpu)


def _issue(key_type: KeyType) -> Callable[[], object]:
    ca = make_ca(common_name=f"bench {key_type}", now=NOW, key_type=key_type)
    return lambda: issue_leaf(issuer=ca, dns_names=NAMES, now=NOW, key_type=key_type)


def _decide() -> Callable[[], object]:
    ca = make_ca(common_name="bench", now=NOW)
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    return lambda: leaf_renewal(cert_pem=leaf.chain_pem, key_pem=leaf.key_pem, desired_dns=NAMES,
                                trusted=[ca.cert], issuer=ca.cert, now=NOW)


def _bundle(count: int) -> Callable[[], object]:
    cas = [make_ca(common_name=f"bench {i}", now=NOW).cert for i in range(count)]
    return lambda: trust_bundle(cas, now=NOW)


def _keystore() -> Callable[[], object]:
    ca = make_ca(common_name="bench", now=NOW)
    leaf: CertKey = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    return lambda: to_pkcs12(leaf, password=b"bench", trusted=[ca.cert])


def rows(scale: float) -> list[tuple[str, int, Callable[[], object]]]:
    def n(base: int) -> int:
        return max(1, int(base * scale))

    return [
        ("issue leaf, ECDSA P-256 (CA and leaf key)", n(500), _issue("ecdsa-p256")),
        ("issue leaf, Ed25519 (CA and leaf key)", n(500), _issue("ed25519")),
        ("issue leaf, RSA-2048 (CA and leaf key)", n(10), _issue("rsa-2048")),
        ("leaf_renewal decision (P-256, kept)", n(500), _decide()),
        ("trust_bundle of 10 CAs", n(200), _bundle(10)),
        ("to_pkcs12 (AES-256, 10k PBKDF2 rounds)", n(50), _keystore()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pki", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row's iteration count")
    args = parser.parse_args()
    print(f"{'operation':<44} {'n':>5} {'wall ms/op':>11} {'ops/s':>7} {'cpu ms/op':>10} {'ops/cpu-s':>10}")
    for label, count, op in rows(args.scale):
        wall, cpu = _median_seconds(op, count)
        per_cpu_second = 1 / max(cpu, 1e-9)  # process_time ticks coarsely; never divide by zero
        print(f"{label:<44} {count:>5} {wall * 1e3:>11.3f} {1 / wall:>7.0f} {cpu * 1e3:>10.3f} {per_cpu_second:>10.0f}",
              flush=True)


if __name__ == "__main__":
    main()
