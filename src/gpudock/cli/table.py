"""Plain-text tables for the commands that list many rows (``gpudock jobs``).

``rich`` takes longer to import and lay out 200 rows than the whole request
does, so long listings are padded columns written straight to stdout, with the
state coloured on a terminal (``STATE_COLOUR``) and the last column unpadded.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

STATE_COLOUR = {
    "PENDING": "33", "ALLOCATED": "36", "STARTING": "36", "RUNNING": "32",
    "SUCCEEDED": "1;32", "FAILED": "31", "CANCELLED": "35", "LOST": "31",
}  # fmt: skip


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], colour: bool = False
) -> str:
    """Columns two spaces apart, headers first; a ``STATE`` cell coloured when ``colour``."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    state = headers.index("STATE") if "STATE" in headers else -1
    lines = []
    for number, row in enumerate([list(headers), *map(list, rows)]):
        cells = []
        for i, cell in enumerate(row):
            text = cell if i == len(row) - 1 else cell.ljust(widths[i])
            if colour and number == 0:
                text = f"\033[1m{text}\033[0m"
            elif colour and i == state and cell in STATE_COLOUR:
                text = f"\033[{STATE_COLOUR[cell]}m{text}\033[0m"
            cells.append(text)
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    sys.stdout.write(format_table(headers, rows, colour=sys.stdout.isatty()) + "\n")
