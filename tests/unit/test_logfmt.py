"""JSON log lines: one object per record with time, level, logger, message, and the job,
node and request id where they apply."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest

from gpudock.api.request_id import choose_request_id
from gpudock.logfmt import JsonFormatter, bind_job, request_id


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gpudock.test_logfmt")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield stream
    logger.removeHandler(handler)


def records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_line_with_an_iso_time_and_zone(lines: io.StringIO) -> None:
    log = logging.getLogger("gpudock.test_logfmt")
    log.info("hello %s\nsecond line", "world")
    (entry,) = records(lines)
    assert entry["level"] == "INFO" and entry["logger"] == "gpudock.test_logfmt"
    assert entry["message"] == "hello world\nsecond line"
    parsed = datetime.fromisoformat(str(entry["time"]))
    assert parsed.utcoffset() is not None, "the time names its zone"
    assert set(entry) == {"time", "level", "logger", "message"}


def test_job_node_and_request_id_appear_where_they_apply(lines: io.StringIO) -> None:
    log = logging.getLogger("gpudock.test_logfmt")
    log.warning("node down", extra={"node": "gpu-7"})
    with bind_job(42):
        log.info("launching")
        log.info("other job", extra={"job": 7})
    token = request_id.set("req-1")
    try:
        log.info("in a request")
    finally:
        request_id.reset(token)
    node, bound, explicit, request = records(lines)
    assert node["node"] == "gpu-7" and "job" not in node
    assert bound["job"] == 42 and explicit["job"] == 7
    assert request["request_id"] == "req-1" and "job" not in request


def test_an_exception_travels_inside_the_same_line(lines: io.StringIO) -> None:
    log = logging.getLogger("gpudock.test_logfmt")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    (entry,) = records(lines)
    assert entry["level"] == "ERROR"
    assert "RuntimeError: boom" in str(entry["exception"])


def test_an_incoming_request_id_is_kept_only_when_usable() -> None:
    assert choose_request_id("abc-123") == "abc-123"
    made = choose_request_id(None)
    assert len(made) == 32 and made != choose_request_id(None)
    for bad in ("", "has space", "x" * 129, "new\nline"):
        assert choose_request_id(bad) != bad
