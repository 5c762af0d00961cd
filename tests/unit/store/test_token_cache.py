"""``TokenCache``: a process's short-lived copies of token rows (``store/tokens.py``)."""

from __future__ import annotations

from dataclasses import replace

from gpudock.store.tokens import TokenCache, TokenInfo

ALICE = TokenInfo(1, None, "alice", False, 0.0, None, None, None, None)
BOB = TokenInfo(2, None, "bob", False, 0.0, None, None, None, None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_copy_is_used_for_less_than_the_ttl_after_its_read() -> None:
    clock = Clock()
    cache = TokenCache(ttl=0.5, monotonic=clock)
    read_at = cache.now()
    clock.now += 0.2  # the read took a while: the age counts from before it
    cache.put("a", ALICE, cache.generation, read_at)
    assert cache.get("a") == ALICE
    clock.now = read_at + 0.49
    assert cache.get("a") == ALICE
    clock.now = read_at + 0.5
    assert cache.get("a") is None
    assert cache.get("never-read") is None


def test_forget_drops_the_tokens_copies_at_once_and_only_its() -> None:
    cache = TokenCache(monotonic=Clock())
    cache.put("a", ALICE, cache.generation, cache.now())
    cache.put("a2", ALICE, cache.generation, cache.now())  # one token, two spellings
    cache.put("b", BOB, cache.generation, cache.now())
    cache.forget(ALICE.id)
    assert (cache.get("a"), cache.get("a2"), cache.get("b")) == (None, None, BOB)


def test_a_read_begun_before_a_revocation_here_is_not_kept_after_it() -> None:
    cache = TokenCache(monotonic=Clock())
    generation, read_at = cache.generation, cache.now()  # a request starts reading the row
    cache.forget(ALICE.id)  # another request revokes it meanwhile
    cache.put("a", ALICE, generation, read_at)  # the first request's (active) copy
    assert cache.get("a") is None
    cache.put("a", replace(ALICE, revoked_at=1.0), cache.generation, cache.now())
    assert cache.get("a") == replace(ALICE, revoked_at=1.0)


def test_a_full_cache_starts_over() -> None:
    cache = TokenCache(size=2, monotonic=Clock())
    for digest in ("a", "b", "c"):
        cache.put(digest, ALICE, cache.generation, cache.now())
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, None, ALICE)
