"""Log lines are JSON objects, one a line, whichever path wrote them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any, TextIO

import pytest

from tls_injector.logs import BATCH_BYTES, AccessBatch, AccessLog, JsonFormatter, LogHandler


@pytest.fixture
def logger_at_info() -> Iterator[logging.Logger]:
    logger = logging.getLogger("tls_injector.test")
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(logging.NOTSET)


def test_the_access_log_writes_the_same_shape_as_the_formatter(logger_at_info: logging.Logger) -> None:
    stream = io.StringIO()
    AccessLog(logger_at_info.name, stream).info("admission", {"uid": "u1", "latency_ms": 0.2})
    record = logger_at_info.makeRecord(logger_at_info.name, logging.INFO, "f", 1, "admission", None, None,
                                       extra={"uid": "u1", "latency_ms": 0.2})
    fast, slow = json.loads(stream.getvalue()), json.loads(JsonFormatter().format(record))
    assert stream.getvalue().endswith("\n")
    assert stream.getvalue().count("\n") == 1
    assert fast.keys() == slow.keys()
    assert {k: v for k, v in fast.items() if k != "time"} == {k: v for k, v in slow.items() if k != "time"}


def test_the_access_log_follows_the_loggers_level(logger_at_info: logging.Logger) -> None:
    logger_at_info.setLevel(logging.WARNING)
    stream = io.StringIO()
    AccessLog(logger_at_info.name, stream).info("admission", {"uid": "u1"})
    assert stream.getvalue() == ""


class _Recorder(io.RawIOBase):
    """A raw stream that keeps each write(2)-sized chunk it is given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return len(data)


def _recorded() -> tuple[_Recorder, AccessBatch, TextIO]:
    raw = _Recorder()
    stream = io.TextIOWrapper(io.BufferedWriter(raw), write_through=True)
    return raw, AccessBatch(lambda: stream), stream


def test_access_lines_are_written_in_whole_batches_no_larger_than_an_atomic_pipe_write(
        logger_at_info: logging.Logger) -> None:
    raw, batch, _ = _recorded()
    access = AccessLog(logger_at_info.name, batch=batch)
    for n in range(100):
        access.info("admission", {"uid": f"u{n}", "object_name": "web-" + "x" * 200})
    assert 0 < len(raw.writes) < 100  # batched, not a write per line
    batch.flush()
    for chunk in raw.writes:
        assert len(chunk) <= BATCH_BYTES
        assert chunk.endswith(b"\n")  # only whole lines: workers sharing a pipe never split each other's
    lines = b"".join(raw.writes).splitlines()
    assert [json.loads(line)["uid"] for line in lines] == [f"u{n}" for n in range(100)]


def test_a_record_through_logging_writes_the_gathered_access_lines_before_itself(
        logger_at_info: logging.Logger) -> None:
    raw, batch, stream = _recorded()
    handler = LogHandler(stream, batch)
    handler.setFormatter(JsonFormatter())
    logger_at_info.addHandler(handler)
    try:
        access = AccessLog(logger_at_info.name, batch=batch)
        access.info("admission", {"uid": "first"})
        assert raw.writes == []  # gathered, not yet written
        logger_at_info.warning("second")
        access.info("admission", {"uid": "third"})
        batch.flush()
    finally:
        logger_at_info.removeHandler(handler)
    lines = [json.loads(line) for line in b"".join(raw.writes).splitlines()]
    assert [line.get("uid", line["msg"]) for line in lines] == ["first", "second", "third"]
