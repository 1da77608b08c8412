"""`serve --workers N`, N above 1: check once what every worker will need, listen, then start the
workers (`python -m tls_injector serve ... --worker-fd`) and watch them (tls_injector.web.workers.Supervisor)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from tls_injector.cli.flags import quoted
from tls_injector.cli.handlers import admission_handlers
from tls_injector.cli.startup import HeldLogs
from tls_injector.offline.rulesfile import RulesFileError
from tls_injector.pki.serving import ServingPairError
from tls_injector.settings import ServeSettings

log = logging.getLogger("tls_injector")


def workers(value: str) -> int:
    """--workers: a number of at least 1, or 'auto'."""
    from tls_injector.web.workers import worker_count  # noqa: PLC0415 - only serving loads the web stack

    try:
        return worker_count(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'expected a number of at least 1 or "auto", got {quoted(value, 20)}') from None


def run_supervisor(args: argparse.Namespace, settings: ServeSettings) -> int:
    """Check, listen, then start and watch the workers; returns the exit status when they are done."""
    with HeldLogs(settings.log_level) as start:  # a start-up error is the only line printed
        return _supervise(args, settings, start)


def _supervise(args: argparse.Namespace, settings: ServeSettings, start: HeldLogs) -> int:
    from tls_injector.web.selfsigned import SelfSignedError, write_self_signed  # noqa: PLC0415
    from tls_injector.web.tls import CertReloader  # noqa: PLC0415
    from tls_injector.web.workers import Supervisor, strip_flags  # noqa: PLC0415

    if not args.no_reconciler:
        return start.failed("serve", "--workers above 1 needs --no-reconciler: run the reconciler as its own "
                                     "Deployment (tls-injector reconcile), as the shipped manifests do")
    extra: list[str] = []
    said: list[str] = []
    try:  # every worker would fail the same way: find it here, once, in one line
        admission_handlers(settings)
        if settings.tls_cert_file is None or settings.tls_private_key_file is None:
            files = write_self_signed(settings.self_signed_dir, now=datetime.now(UTC))
            said.append(f"tls-injector: self-signed CA written to {files.ca_file}")  # once listening
            extra = ["--tls-cert-file", str(files.cert_file), "--tls-private-key-file", str(files.key_file)]
            CertReloader(files.cert_file, files.key_file)
        else:
            CertReloader(settings.tls_cert_file, settings.tls_private_key_file)
    except (RulesFileError, ServingPairError, SelfSignedError) as error:
        return start.failed("serve", str(error))
    passed_on = strip_flags(args.argv, {"--workers": 1, "--probe-port": 1})

    def worker_argv(index: int, fd: int, state: Path) -> list[str]:
        return [sys.executable, "-m", "tls_injector", *passed_on, *extra, "--worker-fd", str(fd),
                "--worker-state", str(state), "--worker-supervisor", str(os.getpid())]

    supervisor = Supervisor(count=args.workers, host=settings.host, port=settings.port,
                            probe_port=settings.probe_port, drain_seconds=settings.drain_seconds,
                            worker_argv=worker_argv)
    try:
        supervisor.bind()
    except OSError as error:
        return start.failed("serve", f"cannot listen on {settings.host}:{settings.port} or probe port "
                                     f"{settings.probe_port}: {error.strerror}")
    try:  # the workers' state and metrics files live in a directory of their own under $TMPDIR
        supervisor.make_state_dir()
    except OSError as error:
        where = error.filename or "the temp directory"
        return start.failed("serve", f"cannot make the workers' directory in {where}: {error.strerror} "
                                     f"(a read-only root file system needs an emptyDir at /tmp)")
    for line in said:
        print(line, flush=True)
    start.started()
    log.info(f"starting: {args.workers} workers on https://{settings.host}:{settings.port}",
             extra={"webhook": f"{settings.host}:{settings.port}", "workers": args.workers,
                    "state_dir": str(supervisor.state_dir)})
    return supervisor.run()
