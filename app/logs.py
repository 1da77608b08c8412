"""Structured logs: one JSON object per line on stderr, extra fields included as keys."""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import BinaryIO, TextIO

import orjson

from tls_injector.admission.clip import clip

# A line stays within a few KiB whatever a client sent: each field is clipped to MAX_ECHO_CHARS (names,
# paths, reasons), the message to MAX_MESSAGE_CHARS, and a traceback keeps only its last
# MAX_TRACEBACK_CHARS (where it was raised) and is written in full once per distinct place: a request
# that trips the same bug a thousand times logs a thousand short lines, not a thousand tracebacks.
MAX_MESSAGE_CHARS = 1024
MAX_TRACEBACK_CHARS = 2048

# Attributes every LogRecord has; anything else was passed with `extra=` and belongs in the line.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._traced: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": clip(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        line.update((k, _bounded(v)) for k, v in vars(record).items() if k not in _STANDARD)
        if record.exc_info:
            line["exception"] = self._exception(record)
        return orjson.dumps(line, default=str).decode()

    def _exception(self, record: logging.LogRecord) -> str:
        kind, error, trace = record.exc_info or (None, None, None)
        while trace is not None and trace.tb_next is not None:
            trace = trace.tb_next
        where = (getattr(kind, "__name__", "?"), trace.tb_frame.f_code.co_filename if trace else "",
                 trace.tb_lineno if trace else 0)
        with self._lock:
            first = where not in self._traced
            self._traced.add(where)
        if not first:
            return f"{where[0]}: {clip(str(error))} (at {where[1]}:{where[2]}; traceback logged before)"
        frames = "".join(traceback.format_tb(record.exc_info[2] if record.exc_info else None))
        frames = frames if len(frames) <= MAX_TRACEBACK_CHARS else "..." + frames[-MAX_TRACEBACK_CHARS:]
        return f"Traceback (most recent call last):\n{frames}{where[0]}: {clip(str(error))}"


# Access lines are gathered and written together: a write(2) per admission call would cost about an eighth
# of a /mutate's server CPU. A batch goes out when the next line would take it past BATCH_BYTES, before any
# other log record (so the order of lines holds), at every tick of the server (at most 1 s) and at exit.
# 4096 bytes is PIPE_BUF: a write to a pipe of at most that size is atomic, so the lines of several worker
# processes sharing the container's stdout never interleave.
# A process killed by SIGKILL loses at most one batch (a dozen lines).
BATCH_BYTES = 4096
# Messages whose constant part of the line an AccessLog keeps encoded: its callers pass a few literals.
MAX_ACCESS_MESSAGES = 16


class AccessBatch:
    """Access lines waiting to be written to `stream()` (the process's stderr)."""

    def __init__(self, stream: Callable[[], TextIO] = lambda: sys.stderr) -> None:
        self.stream = stream
        self.lines = bytearray()
        self.lock = threading.Lock()  # records of other threads (probes, the reconciler) flush it too

    def add(self, line: bytes) -> None:
        lock = self.lock
        lock.acquire()  # not `with`: its __enter__ and __exit__ lookups cost as much again, once per request
        try:
            if len(self.lines) + len(line) > BATCH_BYTES:
                self._write()
            self.lines += line
        finally:
            lock.release()

    def flush(self) -> None:
        if self.lines:
            with self.lock:
                self._write()

    def _write(self) -> None:
        if not self.lines:
            return
        stream = self.stream()
        buffer: BinaryIO | None = getattr(stream, "buffer", None)
        with contextlib.suppress(OSError, ValueError):  # stderr closed or gone: nowhere to write them
            if buffer is not None:
                stream.flush()  # text written directly to the stream goes first
                buffer.write(self.lines)
                buffer.flush()
            else:
                stream.write(self.lines.decode())
                stream.flush()
        self.lines.clear()


ACCESS_BATCH = AccessBatch()


def flush_access_lines() -> None:
    """Write the access lines gathered so far (the server calls this on its tick and at exit)."""
    ACCESS_BATCH.flush()


atexit.register(flush_access_lines)


class AccessLog:
    """One JSON line per admission call, in the same shape as JsonFormatter's, written in batches.

    Measured here, a `logging` call with `extra=` fields cost ~60 us of CPU per admission request,
    as much as the admission work itself; building the line with orjson costs a few microseconds, and
    the batch (BATCH_BYTES) spares the write per line. The level still follows the logger, so
    `--log-level warning` turns it off. With a `stream`, each line is written to it at once (tests).
    """

    def __init__(self, name: str, stream: TextIO | None = None, batch: AccessBatch | None = None) -> None:
        self.name = name
        self._batch = batch or ACCESS_BATCH
        self.enabled = logging.getLogger(name).isEnabledFor(logging.INFO)
        self._stream = stream
        self._second, self._stamp = -1, ""
        self._milli, self._time = -1, b""
        self._heads: dict[str, bytes] = {}

    def info(self, msg: str, fields: dict[str, object]) -> None:
        if not self.enabled:
            return
        # The fields are bounded where they come from: the edge's decode refuses a name, namespace or kind
        # longer than any the apiserver sends, so nothing is clipped here, once per request.
        # The line is {"time", "level", "logger", "msg", *fields}: the time's text (`_time`, with the
        # line's opening) is made once a millisecond, the level, logger and message once per message
        # (`_heads`), and only the fields are encoded per line; their opening brace gives way to a comma.
        head = self._heads.get(msg) or self._head(msg)
        milli = time.time_ns() // 1_000_000
        if milli != self._milli:
            self._tick(milli)
        rest = orjson.dumps(fields, default=str, option=orjson.OPT_APPEND_NEWLINE)  # {...}\n
        encoded = b"".join((self._time, head, b"," if len(rest) > 3 else b"", rest[1:]))
        if self._stream is None:
            self._batch.add(encoded)
        else:
            self._stream.write(encoded.decode())

    def _head(self, msg: str) -> bytes:
        head = orjson.dumps({"level": "info", "logger": self.name, "msg": msg})[1:-1]
        if len(self._heads) < MAX_ACCESS_MESSAGES:
            self._heads[msg] = head
        return head

    def _tick(self, milli: int) -> None:
        """The line's opening up to its level: `{"time":"<ISO 8601>",`, the same text as JsonFormatter's.
        The date and time are formatted once a second (a datetime per line was a third of the line's cost),
        the whole text once a millisecond."""
        second = milli // 1000
        if second != self._second:
            self._second = second
            self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        self._milli, self._time = milli, f'{{"time":"{self._stamp}.{milli % 1000:03d}+00:00",'.encode()


def _bounded(value: object) -> object:
    """Strings are clipped; structured extras (counts by kind, lists of names) are the code's own data."""
    return clip(value) if isinstance(value, str) else value


class LogHandler(logging.StreamHandler[TextIO]):
    """Writes the access lines gathered so far before its own record, so the log stays in order."""

    def __init__(self, stream: TextIO, batch: AccessBatch | None = None) -> None:
        super().__init__(stream)
        self.batch = batch or ACCESS_BATCH

    def emit(self, record: logging.LogRecord) -> None:
        self.batch.flush()
        super().emit(record)


def configure_logging(level: str = "info") -> None:
    handler = LogHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
