"""A command's start: its log lines are held until it has started, so that a start-up error is the only
line it prints (README: errors are one line, starting with `tls-injector <command>:`)."""

from __future__ import annotations

import logging
import threading
from logging.handlers import MemoryHandler
from types import TracebackType

from tls_injector.cli.command import fail
from tls_injector.logs import configure_logging

# A start logs a handful of lines (the cluster domain, what the reconciler and pod certificates do);
# past this many the held lines are written anyway, so a start that logs in a loop cannot grow memory.
MAX_HELD_RECORDS = 1000


class HeldLogs:
    """`with HeldLogs(level) as start:` ... `start.started()` writes the held lines and lets the next ones
    through; `return start.failed(command, message)` drops them and prints the one error line. Leaving
    the block otherwise writes them (a crash's lines may say why), except by a usage error."""

    def __init__(self, level: str) -> None:
        configure_logging(level)
        self._root = logging.getLogger()
        self._target = self._root.handlers[0]
        self._held = MemoryHandler(MAX_HELD_RECORDS, flushLevel=logging.CRITICAL + 1, target=self._target,
                                   flushOnClose=False)
        self._root.handlers[:] = [self._held]
        self._lock = threading.Lock()  # started() may be called from the server's or the reconciler's thread

    def __enter__(self) -> HeldLogs:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is not None and issubclass(kind, SystemExit):  # a usage error: argparse printed it
            self._drop()
        else:  # started, or a crash whose traceback follows: what was logged may say why
            self.started()

    def started(self) -> None:
        with self._lock:
            if self._root.handlers == [self._held]:
                self._held.flush()
                self._root.handlers[:] = [self._target]
            self._held.flush()  # a record another thread added meanwhile

    def failed(self, command: str, message: str) -> int:
        self._drop()
        return fail(command, message)

    def _drop(self) -> None:
        with self._lock:
            self._held.acquire()
            try:
                self._held.buffer.clear()
            finally:
                self._held.release()
            self._root.handlers[:] = [self._target]
