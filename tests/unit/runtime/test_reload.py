"""``Reloads``: a SIGHUP while the server starts is owed, not fatal, and applied once ready.

The API workers answer before the controller can reload, so a SIGHUP sent as
soon as the server answers must neither end it nor be lost. Without
``--config`` a reload only logs that there is nothing to reload, so these
tests need no store.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import cast

import pytest

from gpudock.runtime.context import RuntimeContext
from gpudock.runtime.reload import Reloads

NOTHING = "SIGHUP: the server runs without --config; nothing to reload"
CTX = cast(RuntimeContext, object())  # never touched without a config file


@pytest.fixture
def reloads() -> Iterator[Reloads]:
    before = signal.getsignal(signal.SIGHUP)
    yield Reloads().install()
    signal.signal(signal.SIGHUP, before)


def said(caplog: pytest.LogCaptureFixture, times: int) -> bool:
    """Wait (up to 5 s: reloads run in threads) until NOTHING was logged ``times`` times."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if [r.getMessage() for r in caplog.records].count(NOTHING) >= times:
            return True
        time.sleep(0.01)
    return False


def test_a_sighup_before_ready_is_applied_once_when_ready(
    reloads: Reloads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gpudock.admin")
    os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGHUP)  # still starting: owed once
    time.sleep(0.1)
    assert NOTHING not in caplog.text  # nothing reloads before the controller runs
    reloads.ready(CTX, None)
    assert said(caplog, 1)
    time.sleep(0.1)
    assert [r.getMessage() for r in caplog.records].count(NOTHING) == 1


def test_each_sighup_after_ready_reloads(
    reloads: Reloads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gpudock.admin")
    reloads.ready(CTX, None)
    time.sleep(0.1)
    assert NOTHING not in caplog.text  # none was owed
    os.kill(os.getpid(), signal.SIGHUP)
    assert said(caplog, 1)
    os.kill(os.getpid(), signal.SIGHUP)
    assert said(caplog, 2)
