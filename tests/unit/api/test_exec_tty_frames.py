"""The control frames and query of ``WS /v1/jobs/{id}/exec/tty``, checked before the engine."""

from __future__ import annotations

import pytest

from gpudock.api.routers.job_tty import _job_id, _resize, _side
from gpudock.core.errors import InvalidInput

FRAME = 'a control frame must be {"resize": [rows, cols]}'
RANGE = "resize: rows and cols must be integers from 1 to 10000"


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('{"resize": [40, 120]}', (40, 120)),
        ('{"resize": [1, 10000]}', (1, 10000)),
        ("stty size", FRAME),
        ('{"resize": [40]}', FRAME),
        ('{"resize": [40, 120], "signal": "INT"}', FRAME),
        ('{"size": [40, 120]}', FRAME),
        ("[40, 120]", FRAME),
        ('{"resize": [0, 120]}', RANGE),
        ('{"resize": [40, 10001]}', RANGE),
        ('{"resize": [true, 120]}', RANGE),
        ('{"resize": [40.0, 120]}', RANGE),
        ('{"resize": ["40", 120]}', RANGE),
    ],
)
def test_a_resize_frame_is_a_pair_of_sizes_or_its_refusal(
    text: str, answer: tuple[int, int] | str
) -> None:
    assert _resize(text) == answer


@pytest.mark.parametrize("text", ["0", "10001", "-3", "4x", "", "9" * 40])
def test_a_tty_side_from_the_query_is_1_to_10000(text: str) -> None:
    with pytest.raises(InvalidInput, match="rows: must be an integer from 1 to 10000"):
        _side(text, "rows")


def test_a_job_id_in_the_path_is_digits() -> None:
    assert _job_id("42") == 42
    with pytest.raises(InvalidInput, match=r"job_id: '4\.2' is not a job id"):
        _job_id("4.2")
