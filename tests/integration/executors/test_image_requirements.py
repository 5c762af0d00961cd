"""What an image requires (``executors/_docker_images.py``), read from the real dockerd:
parsed once per image id, and what a reference names remembered for ``REF_SECONDS``, so
a burst of submits of one image asks the engine once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE

from gpudock.executors._docker_images import REF_SECONDS, ImageRequirementCache

pytestmark = pytest.mark.docker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counted:
    """The real docker-py API, counting its image inspections."""

    def __init__(self, api: Any) -> None:
        self.api, self.inspected = api, 0

    def inspect_image(self, image: str) -> Any:
        self.inspected += 1
        return self.api.inspect_image(image)


def test_a_burst_of_lookups_asks_the_engine_once_and_a_moved_tag_is_seen_after_the_window(
    docker_api: Any,
) -> None:
    tag = f"gpudock-test/requires:{uuid.uuid4().hex[:8]}"
    docker_api.images.get(TEST_IMAGE).tag(tag)
    clock, api = Clock(), Counted(docker_api.api)
    cache = ImageRequirementCache(clock)
    try:
        assert [cache.lookup(api, tag) for _ in range(50)] == [(True, None)] * 50
        assert api.inspected == 1
        docker_api.images.remove(tag)
        clock.now += REF_SECONDS - 0.1
        assert cache.lookup(api, tag) == (True, None), "remembered within the window"
        clock.now += 0.2
        assert cache.lookup(api, tag) == (False, None), "the engine asked again after it"
        assert api.inspected == 2
    finally:
        if docker_api.images.list(name=tag):
            docker_api.images.remove(tag)


def test_an_absent_image_is_remembered_absent_and_a_pulled_one_seen_after_the_window(
    docker_api: Any,
) -> None:
    tag = f"gpudock-test/later:{uuid.uuid4().hex[:8]}"
    clock, api = Clock(), Counted(docker_api.api)
    cache = ImageRequirementCache(clock)
    try:
        assert cache.lookup(api, tag) == (False, None)
        docker_api.images.get(TEST_IMAGE).tag(tag)
        assert cache.lookup(api, tag) == (False, None)
        clock.now += REF_SECONDS
        assert cache.lookup(api, tag) == (True, None)
        assert api.inspected == 2
    finally:
        docker_api.images.remove(tag)
