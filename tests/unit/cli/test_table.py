"""The plain ``gpudock jobs`` table: padded columns, the note last, colour only when asked."""

from __future__ import annotations

from gpudock.cli.table import format_table


def test_columns_line_up_and_the_last_is_not_padded() -> None:
    text = format_table(
        ("ID", "STATE", "NOTE"), [["1", "PENDING", "needs 4 GPUs"], ["12", "RUNNING", ""]]
    )

    assert text.splitlines() == [
        "ID  STATE    NOTE",
        "1   PENDING  needs 4 GPUs",
        "12  RUNNING",
    ]


def test_colour_marks_the_header_and_the_state_only() -> None:
    text = format_table(("ID", "STATE"), [["1", "FAILED"]], colour=True)

    assert text.splitlines()[1] == "1   \x1b[31mFAILED\x1b[0m"
