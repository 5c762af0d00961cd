"""Wake-ups across processes (``runtime/wakeup.py``): a worker's ``set`` reaches the
controller's loops at once, through a socket pair or PostgreSQL notifications."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
import pytest
from tests.conftest import PG_URL, require

from gpudock.runtime.wakeup import (
    NotifyListener,
    NotifySender,
    SocketListener,
    SocketSender,
    Wakeup,
    forwarding,
    socket_channel,
)


def wakes() -> dict[str, Wakeup]:
    return {"scheduler": Wakeup(), "reconciler": Wakeup()}


def test_a_wake_up_set_in_another_process_reaches_the_listener() -> None:
    receive, send = socket_channel()
    local = wakes()
    listener = SocketListener(receive, local)
    try:
        code = (
            "import sys; from gpudock.runtime.wakeup import SocketSender, forwarding; "
            "forwarding(SocketSender(int(sys.argv[1])))['reconciler'].set()"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(send.fileno())], pass_fds=[send.fileno()], check=True
        )
        assert local["reconciler"].wait(5)
        assert not local["scheduler"].is_set()
    finally:
        listener.stop()
        send.close()


def test_a_burst_of_wake_ups_never_blocks_the_sender() -> None:
    """Nobody reads: the buffer fills, and a wake-up already waits, so more are dropped."""
    receive, send = socket_channel()
    sender = SocketSender(os.dup(send.fileno()))
    mine = forwarding(sender)["scheduler"]
    started = time.monotonic()
    for _ in range(100_000):
        mine.set()
    assert time.monotonic() - started < 30
    assert receive.recv(16) == b"s"  # what did get through: wake-ups, one a datagram
    sender.close()
    send.close()
    receive.close()


@pytest.mark.postgres
def test_a_notification_wakes_a_listener_on_postgresql() -> None:
    conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    try:
        psycopg.connect(conninfo, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        require("PostgreSQL", str(exc))
    local = wakes()
    listener = NotifyListener(conninfo, local)
    sender = NotifySender(conninfo)
    try:
        assert local["scheduler"].wait(10), "a listener that connects sets every wake-up"
        for kind in ("scheduler", "reconciler"):  # it listens now
            local[kind].clear()
            forwarding(sender)[kind].set()
            assert local[kind].wait(5), kind
    finally:
        sender.close()
        listener.stop()
