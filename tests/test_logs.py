"""Log lines are JSON objects, one a line, whichever path wrote them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from app.logs import AccessLog, JsonFormatter


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
