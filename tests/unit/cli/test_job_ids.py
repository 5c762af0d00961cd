"""Job ids on the command line: several, and an array's tasks (``cli/job_ids.py``)."""

from __future__ import annotations

import pytest

from gpudock.cli.job_ids import JobWord, parse_id


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("42", JobWord("42", 42)),
        ("40_3", JobWord("40_3", 40, (3,))),
        ("40[3]", JobWord("40[3]", 40, (3,))),
        ("40_[0-3]", JobWord("40_[0-3]", 40, (0, 1, 2, 3))),
        ("40[0-2,7,1]", JobWord("40[0-2,7,1]", 40, (0, 1, 2, 7))),
        ("40_*", JobWord("40_*", 40, ())),
        ("40[*]", JobWord("40[*]", 40, ())),
    ],
)
def test_slurm_and_gpudock_spellings(text: str, word: JobWord) -> None:
    assert parse_id(text) == word


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("12x", "must be a number, or an array's tasks"),
        ("-3", "must be a number"),
        ("40[3-1]", "range '3-1' runs backwards"),
        ("40[a]", "'a' is not an index or a range"),
        ("40_", "must be a number"),
        ("40[0-999999]", "names more than 100000 tasks"),
    ],
)
def test_a_malformed_id_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        parse_id(text)
