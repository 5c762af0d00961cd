"""The mount race of issue 38, as a test kit: a folder that keeps turning into a symlink.

``RaceHost`` lays out ``allowed/`` (the allowlist entry), ``allowed/flip/``
(a real folder holding ``marker`` = ``INSIDE``) and ``outside/`` (not
allowed, holding its own ``marker`` = ``OUTSIDE`` and ``secret``).
``Flipper`` swaps ``allowed/flip`` between that folder and a symlink to
``outside`` every 0-20 ms (random), as a job with an ``rw`` mount of
``allowed`` could: a mount of ``allowed/flip`` that reads ``OUTSIDE`` (or
writes into ``outside``) escaped.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path

INSIDE = "inside\n"
OUTSIDE = "outside\n"
SECRET = "not for containers\n"


@dataclass(frozen=True)
class RaceHost:
    root: Path

    @classmethod
    def make(cls, root: Path) -> RaceHost:
        host = cls(root.resolve())
        host.flip.mkdir(parents=True)
        (host.flip / "marker").write_text(INSIDE)
        host.outside.mkdir()
        (host.outside / "marker").write_text(OUTSIDE)
        (host.outside / "secret").write_text(SECRET)
        return host

    @property
    def allowed(self) -> Path:
        return self.root / "allowed"

    @property
    def flip(self) -> Path:
        return self.allowed / "flip"

    @property
    def real(self) -> Path:
        """Where the real folder waits while ``flip`` is a symlink."""
        return self.allowed / ".flip-real"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    def real_identity(self) -> tuple[int, int]:
        """(st_dev, st_ino) of the real folder, wherever it is at the moment."""
        for path in (self.flip, self.real):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if not os.path.islink(path):
                return info.st_dev, info.st_ino
        raise AssertionError("the real folder is gone")

    def outside_untouched(self) -> bool:
        return sorted(os.listdir(self.outside)) == ["marker", "secret"]


class Flipper:
    """Swaps ``host.flip`` between the real folder and ``-> outside`` until stopped.

    Each swap is two renames (the real folder aside, a prepared symlink in its
    place, and back), with a random pause of 0-``max_pause`` seconds after each.
    ``flips`` counts completed swaps.
    """

    def __init__(self, host: RaceHost, max_pause: float = 0.020, seed: int = 38) -> None:
        self.host = host
        self.max_pause = max_pause
        self.flips = 0
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flipper", daemon=True)
        self._link = host.allowed / ".flip-link"

    def __enter__(self) -> Flipper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._restore()

    def _run(self) -> None:
        host = self.host
        while not self._stop.is_set():
            os.rename(host.flip, host.real)  # the folder aside: flip is missing for a moment
            os.symlink(host.outside, self._link)
            os.rename(self._link, host.flip)  # flip -> outside
            self._stop.wait(self._random.uniform(0, self.max_pause))
            os.unlink(host.flip)
            os.rename(host.real, host.flip)  # the real folder back
            self.flips += 1
            self._stop.wait(self._random.uniform(0, self.max_pause))

    def _restore(self) -> None:
        host = self.host
        if host.flip.is_symlink():
            host.flip.unlink()
        if host.real.exists():
            os.rename(host.real, host.flip)
        if self._link.is_symlink():
            self._link.unlink()
