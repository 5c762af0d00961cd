"""The controller's control socket (``runtime/control.py``): a worker's scrape request
gets the controller's exposition; a controller that is gone is an ``OSError``; a slow
scrape does not hold up the role."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time

import pytest

from gpudock.runtime import control


def test_a_worker_gets_the_controllers_exposition() -> None:
    addr = control.address(secrets.token_hex(4), os.getpid())
    served = control.ControlServer(addr, lambda: b"gpudock_up 1\n" * 10_000)
    try:
        assert control.ask(addr) == b"gpudock_up 1\n" * 10_000
        assert control.ask(addr) == b"gpudock_up 1\n" * 10_000  # one request a connection
    finally:
        served.stop()
    with pytest.raises(OSError):
        control.ask(addr, timeout=2)


def test_anything_but_a_scrape_request_is_not_answered() -> None:
    addr = control.address(secrets.token_hex(4), os.getpid())
    served = control.ControlServer(addr, lambda: b"secret")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(addr)
            sock.sendall(b"jobs\n")
            assert sock.recv(100) == b""
    finally:
        served.stop()


def test_a_slow_scrape_does_not_hold_up_the_role() -> None:
    addr = control.address(secrets.token_hex(4), os.getpid())
    release = threading.Event()

    def slow_scrape() -> bytes:
        release.wait(10)
        return b"gpudock_up 1\n"

    served = control.ControlServer(addr, slow_scrape, role="follower")
    scraped: list[bytes] = []
    scraper = threading.Thread(target=lambda: scraped.append(control.ask(addr)))
    try:
        scraper.start()
        time.sleep(0.2)  # the scrape is in progress
        assert control.ask_role(addr) == "follower"  # within its 1 s, not after the scrape
        assert not scraped
        release.set()
        scraper.join(10)
        assert scraped == [b"gpudock_up 1\n"]
    finally:
        release.set()
        served.stop()
