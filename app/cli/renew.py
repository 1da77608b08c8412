"""`tls-injector renew NAMESPACE/WORKLOAD`: ask for a new certificate now and wait until it is in place.

It sets the force-renew annotation on the workload's certificate Secret (what `kubectl annotate secret ...
tls-injector.io/force-renew=now` does) and polls the Secret until it holds a certificate of another serial
with the annotation gone (the reconciler removes it when it renews), or until --timeout; it prints the serial
before and after. --request-timeout bounds each request to the API server (kubectl's name for it).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tls_injector import names
from tls_injector.cli import flags
from tls_injector.cli.cluster import connection_flags
from tls_injector.cli.command import EXIT_FINDINGS, EXIT_OK, Command, fail
from tls_injector.cli.status import read, workload_name

if TYPE_CHECKING:
    from tls_injector.doctor.workload_status import Cluster
    from tls_injector.kube import KubeApi

# How often the Secret is read while waiting: a pass takes seconds, and one GET a second costs nothing.
POLL_SECONDS = 1.0
# The reconciler's loop wakes on the Secret's change (its watch), waits 1 s, and passes; under the 5 s
# pass floor and a pass of tens of seconds on a large cluster, two minutes is ample, and a person can ask
# for more.
DEFAULT_WAIT_SECONDS = 120.0
# A conflicting write (someone else wrote the Secret between our read and our update) is re-read and tried
# again this many times, as the reconciler's own writes are.
ATTEMPTS = 3


def add(renew: argparse.ArgumentParser) -> None:
    renew.add_argument("workload", type=workload_name, metavar="NAMESPACE/WORKLOAD",
                       help="the workload (its name, or Kind/name where names clash) whose certificate to renew")
    renew.add_argument("--timeout", dest="wait", type=flags.duration, default=flags.duration_text(DEFAULT_WAIT_SECONDS),
                       metavar="DURATION",
                       help="how long to wait for the new certificate (a Go duration such as 30s, 5m or 1.5h, or "
                            "plain seconds); exit 1 if it is not in place by then (the request stays: the reconciler "
                            "renews it when it can)")
    connection_flags(renew, request_timeout="--request-timeout")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.doctor import workload_status as ws  # noqa: PLC0415 - only the commands that talk to a cluster load it
    from tls_injector.kube import KubeError, Unavailable  # noqa: PLC0415

    cluster = read(args, "renew")
    if isinstance(cluster, int):
        return cluster
    try:
        return renew(cluster, args)
    except ws.NoSuchWorkload as error:
        return fail("renew", str(error))
    except Unavailable as error:  # the API stopped answering while we waited: the bound was the per-request one
        return fail("renew", f"cannot reach the API server ({args.timeout_flag} "
                             f"{flags.duration_text(args.timeout)}): {error}")
    except KubeError as error:
        return fail("renew", f"{type(error).__name__}: {error}")


def renew(cluster: Cluster, args: argparse.Namespace) -> int:
    """Ask, wait, and say the serial before and after."""
    from tls_injector.doctor import workload_status as ws  # noqa: PLC0415

    namespace, workload = args.workload
    shown = f"{namespace}/{workload}"
    target = ws.target_of(cluster, namespace, workload)
    secret = cluster.snap.secret(target.namespace, target.secret_name)
    if ws.secret_state(secret) != "ours":
        return fail("renew", f"Secret {target.namespace}/{target.secret_name} is {ws.secret_state(secret)}: "
                             f"nothing of tls-injector's to renew (`tls-injector status {shown}` says why)")
    before = ws.serial(secret) or "none"
    request(cluster.api, target.namespace, target.secret_name)
    print(f"asked for a new certificate for Secret {target.namespace}/{target.secret_name} (serial {before}); "
          f"waiting up to {flags.duration_text(args.wait)}", flush=True)
    renewed = wait_for(lambda: ws.renewed(cluster.api, target.namespace, target.secret_name, before), args.wait)
    if renewed is None:
        print(f"not renewed within {flags.duration_text(args.wait)}: is a reconciler leading? `tls-injector status "
              f"{shown}` says what it waits for; the request stays and is honoured when it can be", flush=True)
        return EXIT_FINDINGS
    print(f"renewed: serial {before} -> {renewed}", flush=True)
    return EXIT_OK


def request(api: KubeApi, namespace: str, secret: str) -> None:
    """The force-renew annotation on the Secret, with its resourceVersion as the precondition."""
    from tls_injector.kube import SECRETS, Conflict  # noqa: PLC0415

    for _ in range(ATTEMPTS):
        body = api.get(SECRETS, secret, namespace=namespace)
        annotations = body["metadata"].setdefault("annotations", {}) or {}
        annotations[names.FORCE_RENEW_ANNOTATION] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body["metadata"]["annotations"] = annotations
        try:
            api.replace(SECRETS, body)
            return
        except Conflict:
            continue
    raise Conflict(f"Secret {namespace}/{secret} kept changing while the annotation was written; try again")


def wait_for(done: Callable[[], str | None], seconds: float, *, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> str | None:
    """`done()` every POLL_SECONDS until it returns a text, for at most `seconds`; None on timeout."""
    deadline = clock() + seconds
    while True:
        if (found := done()) is not None:
            return found
        left = deadline - clock()
        if left <= 0:
            return None
        sleep(min(POLL_SECONDS, left))


COMMAND = Command(
    name="renew", add=add, run=run,
    help="renew a workload's certificate now and wait for it (exit 0 renewed, 1 not within --timeout)",
    description="Set the force-renew annotation on the workload's certificate Secret and wait until the reconciler "
                "has put a new certificate in place (a new serial, the annotation removed). Exit 0 renewed, 1 not "
                "within --timeout (the request stays), 2 for a usage error, no such workload, a Secret that is not "
                "tls-injector's, or an API server that does not answer.")
