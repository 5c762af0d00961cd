"""What an image says about the drivers it needs: its ``NVIDIA_REQUIRE_*`` env.

``docker image inspect`` gives the image's id and ``Config.Env``; the parsed
requirements are cached per image id (an id names fixed content, so the cache
is never stale; a tag moved to another image has another id).
"""

from __future__ import annotations

import threading
from typing import Any

import docker.errors

from gpudock.core.cuda_require import ImageRequirements, image_requirements, parse_env_list

MAX_CACHED = 1024


class ImageRequirementCache:
    """``lookup(api, image)``: the image's requirements, parsed once per image id."""

    def __init__(self) -> None:
        self._by_id: dict[str, ImageRequirements | None] = {}
        self._lock = threading.Lock()

    def lookup(self, api: Any, image: str) -> tuple[bool, ImageRequirements | None]:
        """``(present, requirements)``: whether the engine has ``image``, and what its
        env requires (None: nothing). ``ValueError`` for a requirement that does not
        parse; docker-py's errors other than NotFound pass through."""
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
