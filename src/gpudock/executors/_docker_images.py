"""What an image says about the drivers it needs: its ``NVIDIA_REQUIRE_*`` env.

``docker image inspect`` gives the image's id and ``Config.Env``; the parsed
requirements are cached per image id (an id names fixed content, so the cache
is never stale; a tag moved to another image has another id). What a reference
(a tag, a digest) names is remembered for ``REF_SECONDS``: a burst of submits of
one image (a sweep, an array script) asks the engine once, not once a submit; a
tag moved or an image pulled is seen at most that late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import docker.errors

from gpudock.core.cuda_require import ImageRequirements, image_requirements, parse_env_list

MAX_CACHED = 1024
REF_SECONDS = 10.0

Found = tuple[bool, ImageRequirements | None]
"""Whether the engine has the image, and what its env requires (None: nothing)."""


class ImageRequirementCache:
    """``lookup(api, image)``: the image's requirements, parsed once per image id, and
    what a reference names remembered for ``REF_SECONDS`` (module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._by_id: dict[str, ImageRequirements | None] = {}
        self._by_ref: dict[str, tuple[float, Found]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def lookup(self, api: Any, image: str) -> Found:
        """``(present, requirements)`` of ``image``. ``ValueError`` for a requirement that
        does not parse (never remembered: each submit is told); docker-py's errors other
        than NotFound pass through."""
        now = self._clock()
        with self._lock:
            seen = self._by_ref.get(image)
        if seen is not None and now - seen[0] < REF_SECONDS:
            return seen[1]
        found = self._inspect(api, image)
        with self._lock:
            if len(self._by_ref) >= MAX_CACHED:
                self._by_ref.pop(next(iter(self._by_ref)))
            self._by_ref[image] = (now, found)
        return found

    def _inspect(self, api: Any, image: str) -> Found:
        try:
            attrs = api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False, None
        image_id = str(attrs.get("Id", ""))
        with self._lock:
            if image_id in self._by_id:
                return True, self._by_id[image_id]
        env = parse_env_list((attrs.get("Config") or {}).get("Env"))
        found = image_requirements(env)
        with self._lock:
            if len(self._by_id) >= MAX_CACHED:
                self._by_id.pop(next(iter(self._by_id)))
            self._by_id[image_id] = found
        return True, found
