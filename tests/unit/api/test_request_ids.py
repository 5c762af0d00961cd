"""Request ids made by the API (``api/request_id.py``): unique within a process and
across forked API workers, 32 hex digits, and a caller's own usable id kept."""

from __future__ import annotations

import os
import re

from gpudock.api.request_id import choose_request_id

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def test_fresh_ids_are_32_hex_digits_and_never_repeat() -> None:
    made = [choose_request_id(None) for _ in range(1000)]
    assert all(HEX32.fullmatch(rid) for rid in made)
    assert len(set(made)) == len(made)


def test_a_usable_incoming_id_is_kept_and_an_unusable_one_replaced() -> None:
    assert choose_request_id("team-test-42") == "team-test-42"
    assert HEX32.fullmatch(choose_request_id("has space"))
    assert HEX32.fullmatch(choose_request_id("x" * 129))


def test_a_forked_worker_makes_ids_the_parent_never_makes() -> None:
    """API workers are forked from the controller: each gets its own prefix, so two
    workers' counters never give the same id."""
    parent = choose_request_id(None)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then exit at once
        os.write(write, choose_request_id(None).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert HEX32.fullmatch(child)
    assert child[:16] != parent[:16]
