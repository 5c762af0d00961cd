"""The gates before admission (``queue/gates.py``): dependencies and array limits."""

from __future__ import annotations

from gpudock.core.job import JobState
from gpudock.queue.gates import ARRAY, DEPENDENCY, Gated, failed_dependency, gate

S = JobState


def test_after_waits_until_the_dependency_ends_any_way() -> None:
    job = Gated(10, after=(1,))
    waiting = gate([10], {10: job}, {1: S.RUNNING}, {})
    assert waiting.held[10].layer == DEPENDENCY
    assert waiting.held[10].message == "waits for job 1 to end (now RUNNING)"
    assert waiting.cancelled == {}
    for ended in (S.SUCCEEDED, S.FAILED, S.CANCELLED, S.LOST):
        assert gate([10], {10: job}, {1: ended}, {}).excluded == frozenset()


def test_after_ok_waits_for_success_and_cancels_on_any_other_end() -> None:
    job = Gated(10, after_ok=(1, 2))
    held = gate([10], {10: job}, {1: S.SUCCEEDED, 2: S.PENDING}, {}).held[10]
    assert held.message == "waits for job 2 to succeed (now PENDING)"
    assert gate([10], {10: job}, {1: S.SUCCEEDED, 2: S.SUCCEEDED}, {}).excluded == frozenset()
    for ended in (S.FAILED, S.CANCELLED, S.LOST):
        verdict = gate([10], {10: job}, {1: S.SUCCEEDED, 2: ended}, {})
        assert verdict.cancelled == {10: f"dependency job 2 ended {ended.value} (after-ok)"}
        assert verdict.held == {}


def test_a_missing_dependency_counts_as_ended_for_after_and_failed_for_after_ok() -> None:
    assert gate([10], {10: Gated(10, after=(7,))}, {}, {}).excluded == frozenset()
    assert failed_dependency(Gated(10, after_ok=(7,)), {}) == (
        "dependency job 7 no longer exists (after-ok)"
    )


def test_a_failure_cancels_a_whole_after_ok_chain_in_one_pass() -> None:
    chain = {2: Gated(2, after_ok=(1,)), 3: Gated(3, after_ok=(2,)), 4: Gated(4, after=(3,))}
    verdict = gate([4, 3, 2], chain, {1: S.FAILED, 2: S.PENDING, 3: S.PENDING}, {})
    assert set(verdict.cancelled) == {2, 3}
    assert verdict.cancelled[3] == "dependency job 2 ended CANCELLED (after-ok)"
    assert 4 not in verdict.held  # its `after` job is cancelled: it has ended, so 4 may run


def test_several_unmet_dependencies_name_the_first_and_count_the_rest() -> None:
    job = Gated(10, after=(1, 2), after_ok=(3,))
    reason = gate([10], {10: job}, {1: S.RUNNING, 2: S.PENDING, 3: S.RUNNING}, {}).held[10]
    assert reason.message == "waits for job 1 to end (now RUNNING) and 2 more"


def tasks(array_id: int, indices: range, limit: int, **deps: tuple[int, ...]) -> dict[int, Gated]:
    return {array_id + i: Gated(array_id + i, array_id=array_id, array_limit=limit, **deps)
            for i in indices}  # fmt: skip


def test_array_limit_passes_only_the_free_slots_in_the_cycles_order() -> None:
    array = tasks(100, range(10), limit=3)
    verdict = gate(list(array), array, {}, {100: 1})
    assert set(array) - verdict.excluded == {100, 101}  # 1 active + 2 = the limit of 3
    assert verdict.held[105].layer == ARRAY
    assert (
        verdict.held[105].message == "array 100: 1 of its tasks hold resources (at most 3 at once)"
    )
    full = gate(list(array), array, {}, {100: 3})
    assert full.excluded == frozenset(array)


def test_arrays_are_limited_apart_and_plain_jobs_pass() -> None:
    both = {**tasks(100, range(3), limit=1), **tasks(200, range(3), limit=2)}
    verdict = gate([*both, 999], both, {}, {})
    assert set(both) - verdict.excluded == {100, 200, 201}
    assert 999 not in verdict.excluded


def test_a_task_held_by_its_dependency_takes_no_slot_of_its_array() -> None:
    array = tasks(100, range(3), limit=1, after=(50,))
    array[100] = Gated(100, array_id=100, array_limit=1)  # only the first has no dependency
    verdict = gate(list(array), array, {50: S.RUNNING}, {})
    assert 100 not in verdict.excluded
    assert {verdict.held[i].layer for i in (101, 102)} == {DEPENDENCY}
    ended = gate([101, 102, 100], array, {50: S.SUCCEEDED}, {})
    assert set(array) - ended.excluded == {101}  # the cycle's order decides who takes the slot


def test_jobs_not_pending_in_this_cycle_are_ignored() -> None:
    array = tasks(100, range(3), limit=1)
    assert gate([], array, {}, {}).excluded == frozenset()
