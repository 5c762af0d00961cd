"""Admission against quotas: guarantee, limit, borrowing and lending, with exact reasons."""

from __future__ import annotations

import pytest
from tests.unit.queue.builders import GiB, cpus, gpus, hint, make_queue, memory, queue_set, refused

from gpudock.queue import (
    LendingBalance,
    QueuesConfig,
    QueueSet,
    QuotaLedger,
    Resources,
    check_admission,
    job_usage,
)


def research(capacity: int = 32, nlp_lends: bool = True) -> QueueSet:
    """Cohort research: vision (16 guaranteed, limit 24), nlp (16 guaranteed, never borrows)."""
    nlp = make_queue("nlp").cohort("research").guarantee(gpus=16).no_borrow()
    return queue_set(
        make_queue("vision").cohort("research").guarantee(gpus=16).limit(gpus=24),
        nlp if nlp_lends else nlp.no_lend(),
        cohorts=["research"],
    )


def ledger(queues: QueueSet, capacity: Resources, **usage: Resources) -> QuotaLedger:
    return QuotaLedger(queues, capacity, usage)


# ── within the guarantee ───────────────────────────────────────────────────


def test_a_job_within_the_guarantee_is_admitted_without_borrowing() -> None:
    verdict = ledger(research(), gpus(32), vision=gpus(12)).check("vision", gpus(4))
    assert verdict.admitted and not verdict.borrows and verdict.reason is None


def test_a_lender_gets_its_guarantee_even_while_others_borrow_it() -> None:
    # vision borrowed all 8 of nlp's idle guarantee it could reach (limit 24).
    book = ledger(research(), gpus(32), vision=gpus(24))
    assert book.check("nlp", gpus(16)).admitted  # reclaiming is preemption's job


# ── borrowing ──────────────────────────────────────────────────────────────


def test_beyond_the_guarantee_a_queue_borrows_its_cohorts_unused_guarantee() -> None:
    verdict = ledger(research(), gpus(32), vision=gpus(16)).check("vision", gpus(4))
    assert verdict.admitted and verdict.borrows


def test_a_job_straddling_the_guarantee_counts_as_borrowing() -> None:
    verdict = ledger(research(), gpus(32), vision=gpus(14)).check("vision", gpus(4))
    assert verdict.admitted and verdict.borrows


def test_the_limit_caps_borrowing() -> None:
    verdict = ledger(research(), gpus(32), vision=gpus(20)).check("vision", gpus(8))
    assert (
        refused(verdict) == "queue vision would exceed its limit (20/24 GPUs in use, job needs 8)"
    )
    assert hint(verdict) == "runs once queue vision uses at most 16 GPUs"


def test_a_job_larger_than_the_limit_is_told_it_can_never_run() -> None:
    verdict = ledger(research(), gpus(32)).check("vision", gpus(32))
    assert (
        refused(verdict) == "queue vision would exceed its limit (0/24 GPUs in use, job needs 32)"
    )
    assert hint(verdict) == (
        "the job needs 32 GPUs, more than queue vision's limit of 24 GPUs: "
        "it can never run in this queue"
    )


def test_borrowing_disabled_at_quota() -> None:
    verdict = ledger(research(), gpus(32), nlp=gpus(16)).check("nlp", gpus(1))
    assert refused(verdict) == "queue nlp at quota 16/16 GPUs; borrowing disabled"
    assert hint(verdict) == "runs once queue nlp uses at most 15 GPUs"


def test_borrowing_disabled_below_quota_names_the_job_size() -> None:
    verdict = ledger(research(), gpus(32), nlp=gpus(14)).check("nlp", gpus(4))
    assert refused(verdict) == (
        "queue nlp would exceed its guarantee (14/16 GPUs in use, job needs 4); borrowing disabled"
    )


def test_borrowing_disabled_and_a_job_larger_than_the_guarantee() -> None:
    verdict = ledger(research(), gpus(32)).check("nlp", gpus(20))
    assert hint(verdict) == (
        "the job needs 20 GPUs, more than queue nlp's guarantee of 16 GPUs: "
        "raise the guarantee or allow the queue to borrow"
    )


# ── lending ────────────────────────────────────────────────────────────────


def lab() -> QueueSet:
    """Cohort research: vision (4 guaranteed, limit 24) and nlp (28 guaranteed, lends)."""
    return queue_set(
        make_queue("vision").cohort("research").guarantee(gpus=4).limit(gpus=24),
        make_queue("nlp").cohort("research").guarantee(gpus=28),
        cohorts=["research"],
    )


def test_a_cohort_with_nothing_left_to_lend() -> None:
    # nlp uses 16 of 28: 12 lendable, and vision already borrows those 12.
    verdict = ledger(lab(), gpus(32), vision=gpus(16), nlp=gpus(16)).check("vision", gpus(1))
    assert refused(verdict) == "cohort research has no unused capacity to lend (borrowed 12 GPUs)"
    assert hint(verdict) == (
        "runs once cohort research can lend 1 GPU more "
        "(a member uses less of its guarantee, or a borrower finishes)"
    )


def test_a_cohort_with_too_little_left_to_lend() -> None:
    verdict = ledger(lab(), gpus(32), vision=gpus(16), nlp=gpus(14)).check("vision", gpus(4))
    assert refused(verdict) == (
        "cohort research has only 2 GPUs of unused capacity to lend, "
        "job would borrow 4 (borrowed 12 GPUs)"
    )
    assert hint(verdict) == (
        "runs once cohort research can lend 2 GPUs more "
        "(a member uses less of its guarantee, or a borrower finishes)"
    )


def test_a_queue_that_does_not_lend_keeps_its_unused_guarantee() -> None:
    verdict = ledger(research(nlp_lends=False), gpus(32), vision=gpus(16)).check("vision", gpus(1))
    assert refused(verdict) == "cohort research has no unused capacity to lend (borrowed 0 GPUs)"


def test_after_a_lender_takes_back_its_guarantee_nobody_borrows_more() -> None:
    book = ledger(lab(), gpus(32), vision=gpus(16))  # borrowing 12 of nlp's 28
    book.charge("nlp", gpus(20))  # nlp takes 20: only 8 left to lend, 12 are borrowed
    assert book.overflow() == gpus(4)  # over-lent by 4: preemption must reclaim
    assert refused(book.check("vision", gpus(1))).startswith("cohort research has no unused")


def test_unguaranteed_capacity_is_lent_to_any_borrower() -> None:
    # 40 GPUs, 32 guaranteed: 8 belong to nobody. nlp uses all of its own.
    book = ledger(research(), gpus(40), vision=gpus(16), nlp=gpus(16))
    assert book.check("vision", gpus(8)).admitted
    assert book.check("default", gpus(8)).admitted


def test_a_queue_without_cohort_borrows_only_unguaranteed_capacity() -> None:
    book = ledger(research(), gpus(40), default=gpus(8))
    verdict = book.check("default", gpus(1))
    assert refused(verdict) == (
        "the cluster has no unguaranteed capacity left to lend queue default (it borrowed 8 GPUs)"
    )
    assert hint(verdict) == (
        "runs once the cluster can lend 1 GPU more (a borrower finishes); "
        "a queue in a cohort may also borrow its members' unused guarantees"
    )


def test_unguaranteed_capacity_is_shared_between_cohorts_and_loners() -> None:
    book = ledger(research(), gpus(40), vision=gpus(16), nlp=gpus(16), default=gpus(6))
    verdict = book.check("vision", gpus(4))
    assert refused(verdict) == (
        "cohort research has only 2 GPUs of unused capacity to lend, "
        "job would borrow 4 (borrowed 0 GPUs)"
    )


# ── what is counted ────────────────────────────────────────────────────────


def test_without_declared_queues_nothing_is_checked() -> None:
    book = QuotaLedger(QueueSet.from_config(QueuesConfig()), gpus(8), {"default": gpus(8)})
    verdict = book.check("default", gpus(8, "640GiB", cpus=64))
    assert verdict.admitted and not verdict.borrows


def test_shared_jobs_count_fractions_of_a_gpu() -> None:
    queues = queue_set(make_queue("q").guarantee(gpus=1).no_borrow())
    book = QuotaLedger(queues, gpus(8))
    quarter = job_usage(20 * GiB, [80 * GiB])  # 20GiB of an 80GiB GPU
    for _ in range(3):
        assert book.check("q", quarter).admitted
        book.charge("q", quarter)
    half = job_usage(20 * GiB, [40 * GiB])  # the same share of a 40GiB GPU
    verdict = book.check("q", half)
    assert refused(verdict) == (
        "queue q would exceed its guarantee (0.75/1 GPUs in use, job needs 0.5); borrowing disabled"
    )
    assert book.check("q", quarter).admitted


def test_gpu_memory_quotas_count_whole_gpus_for_exclusive_jobs() -> None:
    queues = queue_set(make_queue("q").guarantee(gpu_memory="320GiB").no_borrow())
    book = QuotaLedger(queues, gpus(8, "640GiB"), {"q": job_usage(None, [80 * GiB] * 4)})
    verdict = book.check("q", memory("10GiB"))
    assert refused(verdict) == "queue q at quota 320GiB/320GiB GPU memory; borrowing disabled"
    assert hint(verdict) == "runs once queue q uses at most 310GiB GPU memory"


def test_only_resources_someone_sets_a_quota_on_are_checked() -> None:
    queues = queue_set(make_queue("q").guarantee(gpus=2).no_borrow())
    assert QuotaLedger(queues, gpus(8)).check("q", gpus(2, cpus=500)).admitted


def test_a_governed_resource_without_guarantee_is_borrowed() -> None:
    queues = queue_set(make_queue("a").guarantee(cpus=8), make_queue("b"))
    verdict = QuotaLedger(queues, gpus(8, cpus=16)).check("b", cpus(4))
    assert verdict.admitted and verdict.borrows


def test_the_first_failing_resource_in_order_is_reported() -> None:
    queues = queue_set(make_queue("q").guarantee(gpus=1, gpu_memory="10GiB").no_borrow())
    verdict = QuotaLedger(queues, gpus(8, "640GiB")).check("q", gpus(2, "20GiB"))
    assert refused(verdict).endswith("(0/1 GPUs in use, job needs 2); borrowing disabled")


def test_an_undeclared_queue_is_refused() -> None:
    verdict = QuotaLedger(research(), gpus(32)).check("nope", gpus(1))
    assert refused(verdict) == "queue nope does not exist"
    assert hint(verdict) == (
        "resubmit to a declared queue, or declare it under queues.queues in the server config"
    )


# ── the ledger ─────────────────────────────────────────────────────────────


def test_check_never_mutates_and_charge_accumulates() -> None:
    book = QuotaLedger(research(), gpus(32))
    first = book.check("vision", gpus(24))
    assert book.check("vision", gpus(24)) == first and book.usage("vision") == Resources()
    book.charge("vision", gpus(20))
    book.charge("vision", gpus(2))
    assert book.usage("vision") == gpus(22)
    assert book.balance("vision") == LendingBalance(
        borrowed=gpus(6), lendable=gpus(16), pool_free=Resources()
    )


def test_usages_lists_every_queue() -> None:
    book = QuotaLedger(research(), gpus(32), {"stray": gpus(1)})
    assert book.usages() == {
        "default": Resources(),
        "nlp": Resources(),
        "vision": Resources(),
        "stray": gpus(1),
    }


@pytest.mark.parametrize("used", [0, 10, 16, 20])
def test_the_pure_rule_matches_the_ledger(used: int) -> None:
    queues = research()
    book = QuotaLedger(queues, gpus(32), {"vision": gpus(used)})
    pure = check_admission(
        queues.get("vision"), gpus(used), gpus(6), book.balance("vision"), queues.tracked
    )
    assert pure == book.check("vision", gpus(6))


def test_a_lender_going_beyond_its_guarantee_cannot_borrow_its_own_unused_part() -> None:
    # nlp uses 20 of 28 (8 unused), vision borrows 4 of those 8; 32 GPUs, 28 in use.
    book = ledger(lab(), gpus(32), vision=gpus(8), nlp=gpus(20))
    verdict = book.check("nlp", gpus(10))  # 8 of its own guarantee + 2 borrowed: 38 in all
    assert refused(verdict) == "cohort research has no unused capacity to lend (borrowed 4 GPUs)"
    assert book.check("nlp", gpus(4)).admitted


def test_while_another_cohort_is_over_lent_nobody_borrows() -> None:
    queues = queue_set(
        make_queue("a1").cohort("A").guarantee(gpus=8),
        make_queue("a2").cohort("A"),
        make_queue("b1").cohort("B").guarantee(gpus=8),
        make_queue("b2").cohort("B"),
        cohorts=["A", "B"],
    )
    book = ledger(queues, gpus(16), a2=gpus(8))  # a2 borrows all of a1's guarantee
    assert book.check("b2", gpus(2)).admitted  # b1 is idle and lends
    book.charge("a1", gpus(8))  # a1 takes its guarantee back: all 16 GPUs are in use
    verdict = book.check("b2", gpus(2))
    assert refused(verdict) == (
        "cohort B has no unused capacity to lend (borrowed 0 GPUs; "
        "other cohorts borrowed 8 GPUs more than can be lent)"
    )
    assert book.check("b1", gpus(8)).admitted  # guarantees are still admitted


def test_a_job_is_never_refused_on_a_resource_it_does_not_request() -> None:
    queues = queue_set(make_queue("q").guarantee(gpus=4, cpus=8).no_borrow())
    book = QuotaLedger(queues, gpus(8, cpus=16), {"q": cpus(12)})  # over its CPUs (config cut)
    verdict = book.check("q", gpus(2))
    assert verdict.admitted and not verdict.borrows
    assert refused(book.check("q", gpus(1, cpus=1))) == (
        "queue q over quota 12/8 CPUs; borrowing disabled"
    )
