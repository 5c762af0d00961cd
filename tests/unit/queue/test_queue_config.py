"""Queue config: parsing with units, defaults, and precise validation errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tests.unit.queue.builders import GiB, gpus, make_queue, queue_set

from gpudock.config import format_validation_error
from gpudock.queue import (
    DEFAULT_QUEUE,
    Limits,
    QueueConfig,
    QueuesConfig,
    QueueSet,
    Resources,
    capacity_warnings,
)
from gpudock.queue import config as config_module


def parse(data: object) -> QueuesConfig:
    return QueuesConfig.model_validate(data)


class ServerLike(BaseModel):
    """How the lead hooks it into ``ServerConfig``: a ``queues:`` key."""

    model_config = ConfigDict(extra="forbid")
    queues: QueuesConfig = Field(default_factory=QueuesConfig)


def error(data: object) -> str:
    """The one-line error ``load_config`` would print for a server config ``data``."""
    with pytest.raises(ValidationError) as info:
        ServerLike.model_validate(data)
    return format_validation_error(info.value)


def test_the_documented_example_parses() -> None:
    doc = config_module.__doc__ or ""
    example = doc.split("::", 1)[1].split("\n\n")[1]
    cfg = parse(yaml.safe_load(example)["queues"])
    vision = cfg.queues[0]
    assert vision.guarantee.gpu_memory == 1280 * GiB and vision.limit.gpus == 24
    assert cfg.fair_share.half_life == 7 * 86400
    assert cfg.fair_share.resource_weights.cpus == 0
    assert cfg.queues[1].borrow is False


def test_defaults_guarantee_nothing_limit_nothing_and_share() -> None:
    queue = QueueConfig(name="q")
    assert queue.weight == 1 and queue.borrow and queue.lend and queue.cohort is None
    assert queue.guarantee.named() == () and queue.limit.named() == ()


def test_sizes_and_durations_accept_units() -> None:
    cfg = parse(
        {
            "queues": [{"name": "q", "guarantee": {"gpu_memory": "320GiB", "cpus": 1.5}}],
            "fair_share": {"half_life": "1h30m"},
        }
    )
    assert cfg.queues[0].guarantee.gpu_memory == 320 * GiB
    assert cfg.fair_share.half_life == 5400


def test_default_queue_exists_implicitly_with_guarantee_0_and_no_limit() -> None:
    queues = QueueSet.from_config(QueuesConfig())
    default = queues.get(DEFAULT_QUEUE)
    assert default.declared and default.guarantee == Resources() and default.limit == Limits()
    assert queues.tracked == frozenset()


def test_a_declared_default_queue_is_kept() -> None:
    queues = queue_set(make_queue("default").guarantee(gpus=2))
    assert queues.get("default").guarantee == gpus(2)
    assert list(queues.queues) == ["default"]


def test_quotas_become_exact_and_tracked() -> None:
    queues = queue_set(make_queue("a").guarantee(gpus=2.5).limit(gpu_memory="80GiB"))
    a = queues.get("a")
    assert a.guarantee.gpus == Fraction(5, 2)
    assert a.limit == Limits(gpu_memory=Fraction(80 * GiB))
    assert queues.tracked == {"gpus", "gpu_memory"}


def test_an_undeclared_queue_is_a_stand_in() -> None:
    stranger = queue_set().get("nope")
    assert not stranger.declared and stranger.cohort is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"queues": [{"name": "vision"}, {"name": "nlp"}, {"name": "vision"}]},
            "queues: queue 'vision' is declared more than once (queues[0] and queues[2])",
        ),
        (
            {"cohorts": ["research"], "queues": [{"name": "v", "cohort": "reserch"}]},
            "queues: queue 'v' refers to unknown cohort 'reserch' (declared cohorts: research)",
        ),
        (
            {"queues": [{"name": "v", "cohort": "research"}]},
            "unknown cohort 'research' (declared cohorts: none; list it under queues.cohorts)",
        ),
        (
            {"queues": [{"name": "v", "guarantee": {"gpus": 32}, "limit": {"gpus": 24}}]},
            "queues.queues.0: queue 'v': guarantee of 32 GPUs exceeds its limit of 24 GPUs",
        ),
        (
            {
                "queues": [
                    {
                        "name": "v",
                        "guarantee": {"gpu_memory": "1TiB"},
                        "limit": {"gpu_memory": "512GiB"},
                    }
                ]
            },
            "guarantee of 1024GiB GPU memory exceeds its limit of 512GiB GPU memory",
        ),
        ({"cohorts": ["a", "a"]}, "queues.cohorts: cohort 'a' is declared more than once"),
        (
            {"queues": [{"name": "v", "weight": 0}]},
            "queues.queues.0.weight: Input should be greater than 0",
        ),
        ({"queues": [{"name": "bad name"}]}, "queue name must be 1-63 characters"),
        ({"queues": [{"name": "v", "guarantee": {"gpus": -1}}]}, "queues.queues.0.guarantee.gpus"),
        ({"queues": [{"name": "v", "guarantee": {"gpu_memory": "lots"}}]}, "expected a size"),
        ({"queues": [{"name": "v", "quota": {}}]}, "queues.queues.0.quota: unknown field"),
        (
            {"fair_share": {"half_life": 0}},
            "queues.fair_share.half_life: Input should be greater than 0",
        ),
        ({"fair_share": {"half_life": "a week"}}, "expected a duration"),
        (
            {"fair_share": {"resource_weights": {"gpus": 0, "gpu_memory": 0, "cpus": 0}}},
            "at least one resource weight must be greater than zero",
        ),
    ],
)
def test_bad_config_is_refused_precisely(data: object, message: str) -> None:
    text = error({"queues": data})
    assert message in text, text


def test_guarantees_above_capacity_are_a_warning_naming_each_queue() -> None:
    queues = queue_set(
        make_queue("vision").guarantee(gpus=16), make_queue("nlp").guarantee(gpus=24)
    )
    assert capacity_warnings(queues, gpus(32)) == [
        "queues guarantee 40 GPUs in total but the cluster has 32 GPUs "
        "(nlp 24 GPUs, vision 16 GPUs): not every guarantee can be honoured at once"
    ]
    assert capacity_warnings(queues, gpus(40)) == []


def test_a_queue_that_cannot_borrow_a_resource_it_lacks_is_flagged() -> None:
    queues = queue_set(
        make_queue("vision").guarantee(gpus=8, gpu_memory="640GiB"),
        make_queue("nlp").guarantee(gpus=8).no_borrow(),
    )
    assert capacity_warnings(queues, gpus(16, "1280GiB")) == [
        "queue nlp may not borrow and has no gpu_memory guarantee: "
        "its jobs that use gpu_memory are never admitted"
    ]
