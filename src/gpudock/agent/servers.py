"""The servers an agent reports to: every replica it was given, the one that answers first.

``gpudock agent --server URL[,URL...]``: on PostgreSQL every replica serves the
API (the leader and its ``--standby`` followers), so an agent given all of
them keeps reporting when the one it talks to dies, and its node stays
watched through a takeover. ``post`` sends to the server that answered last;
when that one cannot be reached or answers 503 (its database is away), it
tries the others in the given order, and the first that answers (anything
but 503) is the one it talks to from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx

log = logging.getLogger("gpudock.agent")


def parse_servers(spec: str) -> list[str]:
    """``URL[,URL...]`` as a list, blanks dropped; ``ValueError`` when none is left."""
    urls = [u.strip() for u in spec.split(",") if u.strip()]
    if not urls:
        raise ValueError("--server needs at least one URL")
    return urls


class Servers:
    """One client per server URL (module doc); ``post`` fails over between them."""

    def __init__(self, urls: Sequence[str], timeout: float, http: httpx.Client | None = None):
        if http is not None:
            self.clients = [http]
        else:
            self.clients = [httpx.Client(base_url=url, timeout=timeout) for url in urls]
        self.current = 0

    @property
    def url(self) -> str:
        """The server talked to now."""
        return str(self.clients[self.current].base_url)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """POST to the current server, else to the next that answers; its response (a 503
        only when every one answered 503), or the last ``httpx.HTTPError`` when none
        answered at all."""
        error: httpx.HTTPError | None = None
        unavailable: httpx.Response | None = None
        count = len(self.clients)
        for step in range(count):
            index = (self.current + step) % count
            try:
                response = self.clients[index].post(path, **kwargs)
            except httpx.HTTPError as exc:
                error = exc
                continue
            if response.status_code == 503 and step < count - 1:
                unavailable = response
                continue
            if index != self.current:
                log.warning("reporting to %s now", self.clients[index].base_url)
                self.current = index
            return response
        if unavailable is not None:
            return unavailable
        assert error is not None
        raise error

    def close(self) -> None:
        for client in self.clients:
            client.close()
