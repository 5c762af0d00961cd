"""The counting rule: what a job costs its queue, exactly."""

from __future__ import annotations

from fractions import Fraction

from tests.unit.queue.builders import GiB

from gpudock.queue import Resources, capacity_of, job_usage, pending_usage
from gpudock.queue.resources import amount, ratio


def test_an_exclusive_job_counts_whole_gpus_and_their_memory() -> None:
    usage = job_usage(None, [80 * GiB, 80 * GiB], cpus=8)
    assert usage == Resources.of(gpus=2, gpu_memory=160 * GiB, cpus=8)


def test_a_shared_job_counts_its_share_of_the_gpu_it_runs_on() -> None:
    # gpus=1, gpu_memory=20GiB on an 80GiB GPU: 20/80 of a GPU and 20GiB.
    usage = job_usage(20 * GiB, [80 * GiB])
    assert usage.gpus == Fraction(1, 4)
    assert usage.gpu_memory == 20 * GiB


def test_a_shared_multi_gpu_job_sums_each_gpu() -> None:
    usage = job_usage(20 * GiB, [80 * GiB, 40 * GiB])
    assert usage.gpus == Fraction(1, 4) + Fraction(1, 2)
    assert usage.gpu_memory == 40 * GiB


def test_four_quarter_shares_make_exactly_one_gpu() -> None:
    quarters = [job_usage(20 * GiB, [80 * GiB]) for _ in range(4)]
    assert sum((q.gpus for q in quarters), Fraction(0)) == 1


def test_a_cpu_only_job_counts_only_cpus() -> None:
    assert job_usage(None, [], cpus=2.5) == Resources.of(cpus=Fraction(5, 2))


def test_a_pending_share_is_priced_on_the_smallest_gpu_it_fits() -> None:
    # Could run on 40GiB or 80GiB GPUs (not on the 16GiB one): counts 20/40.
    usage = pending_usage(1, 20 * GiB, [16 * GiB, 40 * GiB, 80 * GiB])
    assert usage == Resources.of(gpus=Fraction(1, 2), gpu_memory=20 * GiB)


def test_a_pending_exclusive_job_is_priced_on_the_largest_gpu_memory() -> None:
    usage = pending_usage(2, None, [40 * GiB, 80 * GiB])
    assert usage == Resources.of(gpus=2, gpu_memory=160 * GiB)


def test_the_pending_price_bounds_the_placed_usage() -> None:
    eligible = [40 * GiB, 80 * GiB]
    for share in (None, 10 * GiB, 40 * GiB):
        estimate = pending_usage(1, share, eligible)
        for size in eligible:
            placed = job_usage(share, [size])
            assert placed.gpus <= estimate.gpus and placed.gpu_memory <= estimate.gpu_memory


def test_a_pending_job_with_no_eligible_gpu_counts_whole_gpus() -> None:
    assert pending_usage(2, 20 * GiB, [16 * GiB]) == Resources.of(gpus=2, gpu_memory=40 * GiB)
    assert pending_usage(2, None, []) == Resources.of(gpus=2)


def test_capacity_counts_each_gpu_and_its_memory() -> None:
    assert capacity_of([80 * GiB] * 4, cpus=64) == Resources.of(4, 320 * GiB, 64)


def test_floats_are_read_as_decimals() -> None:
    assert Resources.of(cpus=0.1).cpus == Fraction(1, 10)


def test_amounts_are_worded_per_resource() -> None:
    assert amount("gpus", Fraction(1)) == "1 GPU"
    assert amount("gpus", Fraction(5, 12)) == "0.42 GPUs"
    assert amount("gpu_memory", Fraction(20 * GiB)) == "20GiB GPU memory"
    assert ratio("gpus", Fraction(16), Fraction(16)) == "16/16 GPUs"
    assert ratio("gpu_memory", Fraction(300 * GiB), Fraction(320 * GiB)) == (
        "300GiB/320GiB GPU memory"
    )
    assert ratio("cpus", Fraction(12), Fraction(16)) == "12/16 CPUs"


def test_to_dict_gives_plain_numbers() -> None:
    usage = Resources.of(gpus=Fraction(1, 3), gpu_memory=20 * GiB, cpus=2)
    assert usage.to_dict() == {"gpus": 0.3333, "gpu_memory": 20 * GiB, "cpus": 2.0}
