"""The API's edges: body-size limit, 405 with ``Allow``, and bodies that are not text."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess

pytestmark = pytest.mark.docker

LIMIT = 64 * 1024


@pytest.fixture
def small_limit_server(make_server: Callable[..., ServerProcess]) -> Iterator[ServerProcess]:
    """One SQLite server whose body limit is 64 KiB (cheap to exceed)."""
    config = {**FAST_CONFIG, "api": {"max_body_bytes": "64KiB"}}
    yield make_server(config=config).start()


def test_a_body_over_the_limit_is_refused_with_413_naming_the_limit(
    small_limit_server: ServerProcess,
) -> None:
    with small_limit_server.api() as api:
        big = {"image": TEST_IMAGE, "env": {"BLOB": "x" * (LIMIT + 10)}}
        response = api.post("/v1/jobs", json=big)
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["code"] == "PayloadTooLarge"
        assert "64.0KiB" in error["message"] or "65536 bytes" in error["message"]
        assert api.get("/v1/jobs").json() == [], "nothing of the refused job was stored"


def test_a_streamed_body_without_length_is_cut_at_the_limit(
    small_limit_server: ServerProcess,
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"image": "' + TEST_IMAGE.encode() + b'", "env": {"BLOB": "'
        for _ in range(LIMIT // 1024 + 8):
            yield b"x" * 1024
        yield b'"}}'

    with small_limit_server.api() as api:
        response = api.post(
            "/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 413, response.text
        assert api.get("/v1/jobs").json() == []


def test_a_body_under_the_limit_is_accepted(small_limit_server: ServerProcess) -> None:
    with small_limit_server.api() as api:
        response = api.post("/v1/jobs", json={"image": TEST_IMAGE, "command": ["true"]})
        assert response.status_code == 201, response.text


def test_a_wrong_method_gets_405_with_allow(small_limit_server: ServerProcess) -> None:
    with small_limit_server.api() as api:
        response = api.delete("/v1/jobs")
        assert response.status_code == 405
        assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD", "POST"}
        assert response.json()["error"]["code"] == "HTTPError"


def test_a_body_that_is_not_utf8_is_422_naming_the_body(
    small_limit_server: ServerProcess,
) -> None:
    with small_limit_server.api() as api:
        response = api.post(
            "/v1/jobs",
            content=b'{"image": "\xff\xfe"}',
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == "body"
        assert error["message"].startswith("body: not UTF-8 text")


def test_healthz_reports_the_database(small_limit_server: ServerProcess) -> None:
    body = httpx.get(small_limit_server.url + "/healthz").json()
    assert body["status"] == "ok"
    assert body["db"] == "ok"


def test_job_listings_are_paged_with_a_cursor(small_limit_server: ServerProcess) -> None:
    with small_limit_server.api() as api:
        submitted = [
            int(api.post("/v1/jobs", json={"image": TEST_IMAGE, "command": ["true"]}).json()["id"])
            for _ in range(5)
        ]
        seen: list[int] = []
        params: dict[str, int] = {"limit": 2}
        for _ in range(10):
            response = api.get("/v1/jobs", params=params)
            assert response.status_code == 200
            seen += [job["id"] for job in response.json()]
            cursor = response.headers.get("x-next-cursor")
            if cursor is None:
                assert "link" not in response.headers
                break
            assert f"before={cursor}" in response.headers["link"]
            params = {"limit": 2, "before": int(cursor)}
        assert seen == sorted(submitted, reverse=True), "every job once, newest first"
        assert len(api.get("/v1/jobs").json()) == 5, "the default page holds them all"
