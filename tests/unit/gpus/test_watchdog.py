"""The watchdog's judgement: per job and GPU, memory against the limit; strays."""

from __future__ import annotations

from gpudock.gpus.watchdog import Assignment, Offence, ProcessSample, Stray, judge

GIB = 1024**3
G0, G1, G2 = "GPU-0", "GPU-1", "GPU-2"


def sample(
    gpu: str, pid: int, used: float, job: int | None, container: str | None = "c"
) -> ProcessSample:
    return ProcessSample(gpu, pid, int(used * GIB), container, job)


def test_a_job_over_its_share_on_a_gpu_is_an_offence_its_neighbour_is_not() -> None:
    jobs = [Assignment(1, (G0,), 4 * GIB), Assignment(2, (G0,), 4 * GIB)]
    samples = [
        sample(G0, 10, 2, 1),
        sample(G0, 11, 1.5, 1),
        sample(G0, 20, 5, 2),
        sample(G0, 21, 1, 2),
    ]

    verdict = judge(samples, jobs)

    assert verdict.offences == [Offence(2, G0, 6 * GIB, 4 * GIB, 20)]
    assert verdict.usage == {(1, G0): int(3.5 * GIB), (2, G0): 6 * GIB}
    assert verdict.offences[0].reason == (
        "GPU memory limit exceeded: used 6.0 GiB of 4.0 GiB on GPU-0 (pid 20)"
    )


def test_the_limit_holds_per_gpu_and_exactly_at_it_is_fine() -> None:
    jobs = [Assignment(1, (G0, G1), 4 * GIB)]
    verdict = judge([sample(G0, 1, 4, 1), sample(G1, 1, 3, 1)], jobs)
    assert verdict.offences == []


def test_whole_gpus_have_no_limit_but_another_gpu_is_an_offence() -> None:
    jobs = [Assignment(1, (G0,), None)]
    verdict = judge([sample(G0, 1, 79, 1), sample(G1, 2, 0.5, 1)], jobs)
    assert verdict.offences == [Offence(1, G1, GIB // 2, 0, 2)]
    assert verdict.offences[0].reason == (
        "GPU memory used on a GPU not allocated to the job: 512.0 MiB on GPU-1 (pid 2)"
    )


def test_strays_are_processes_of_no_job_on_a_gpu_a_job_holds() -> None:
    jobs = [Assignment(1, (G0,), None)]
    samples = [
        sample(G0, 5, 1, None, None),  # a host process
        sample(G0, 6, 1, 99, "x"),  # a container of a job that holds nothing here
        sample(G2, 7, 1, None, None),  # on a GPU no job holds: the admin's business
    ]
    verdict = judge(samples, jobs)
    assert verdict.strays == [Stray(G0, 5, GIB, None), Stray(G0, 6, GIB, "x")]
    assert verdict.offences == []
