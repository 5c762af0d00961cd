"""An agent given several servers reports to the one that answers, and stays with it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from gpudock.agent.servers import Servers, parse_servers


class Replica:
    """A real HTTP server on a free port answering every POST with ``status``."""

    def __init__(self, status: int) -> None:
        self.status, self.posts = status, 0
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                replica.posts += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(replica.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@contextlib.contextmanager
def replicas(*statuses: int) -> Iterator[list[Replica]]:
    made = [Replica(s) for s in statuses]
    try:
        yield made
    finally:
        for replica in made:
            replica.close()


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once closed


def test_a_dead_server_is_skipped_and_the_one_that_answered_is_kept() -> None:
    with replicas(200) as (alive,):
        servers = Servers([closed_url(), alive.url], timeout=2)
        assert servers.post("/v1/agent/sync", content=b"{}").status_code == 200
        assert servers.url.rstrip("/") == alive.url
        servers.post("/v1/agent/sync", content=b"{}")
        assert alive.posts == 2
        servers.close()


def test_a_server_whose_database_is_away_gives_way_to_one_that_answers() -> None:
    with replicas(503, 200) as (away, alive):
        servers = Servers([away.url, alive.url], timeout=2)
        assert servers.post("/v1/agent/sync").status_code == 200
        assert (away.posts, alive.posts) == (1, 1)
        servers.close()


def test_when_every_server_answers_503_the_last_answer_is_returned() -> None:
    with replicas(503, 503) as (one, two):
        servers = Servers([one.url, two.url], timeout=2)
        assert servers.post("/v1/agent/sync").status_code == 503
        assert (one.posts, two.posts) == (1, 1)
        servers.close()


def test_when_none_answers_the_error_is_raised() -> None:
    servers = Servers([closed_url(), closed_url()], timeout=2)
    with pytest.raises(httpx.ConnectError):
        servers.post("/v1/agent/sync")
    servers.close()


def test_the_server_list_is_comma_separated_and_never_empty() -> None:
    assert parse_servers(" http://a:1 , http://b:2,") == ["http://a:1", "http://b:2"]
    with pytest.raises(ValueError, match="at least one URL"):
        parse_servers(" , ")
