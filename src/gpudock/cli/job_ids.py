"""Job ids on the command line: several at once, and tasks of job arrays.

``cancel``, ``hold``, ``release`` and ``requeue`` take any number of ids, each:

* ``42``: job 42 (an array's first task has the array's id);
* ``40_3`` or ``40[3]``: the task of array 40 with index 3 (Slurm's spelling,
  and the one ``gpudock jobs`` prints);
* ``40_[0-3,7]`` or ``40[0-3,7]``: those tasks (ranges and lists of indices);
* ``40_*`` or ``40[*]``: every task of array 40.

``parse_ids`` reads the words (a malformed one is a usage error, before any
request); ``Resolver`` turns an array's indices into job ids, reading the
array's first task and listing its tasks, so an index the array does not have
is an error naming the array's range, never another job. Light: no server code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpudock.cli.client import Client, ClientError

_ID = re.compile(r"(?P<job>[0-9]{1,18})(?:(?:_|(?=\[))(?P<tasks>[0-9]{1,9}|\[[^\]]*\]|\*))?")
_ITEM = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")
MAX_TASKS = 100_000
"""At most this many tasks in one word (``40[0-99999]``)."""


@dataclass(frozen=True, slots=True)
class JobWord:
    """One id word. ``indices`` is None for a plain job, ``()`` for every task of the
    array ``job``, else the indices named (in the order given, without repeats)."""

    text: str
    job: int
    indices: tuple[int, ...] | None = None


def parse_id(text: str) -> JobWord:
    """One word (module doc); ``ValueError`` with a one-line message otherwise."""
    match = _ID.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"job id {text!r} must be a number, or an array's tasks as ID_INDEX, "
            "ID[FIRST-LAST,...] or ID[*] (e.g. 42, 40_3, 40[0-3], 40[*])"
        )
    job, tasks = int(match["job"]), match["tasks"]
    if tasks is None:
        return JobWord(text, job)
    inner = tasks[1:-1] if tasks.startswith("[") else tasks
    if inner == "*":
        return JobWord(text, job, ())
    indices: dict[int, None] = {}
    for item in inner.split(","):
        found = _ITEM.fullmatch(item.strip())
        if found is None:
            raise ValueError(f"job id {text!r}: {item!r} is not an index or a range FIRST-LAST")
        first = int(found[1])
        last = int(found[2]) if found[2] is not None else first
        if first > last:
            raise ValueError(f"job id {text!r}: range {item!r} runs backwards")
        if last - first + 1 + len(indices) > MAX_TASKS:
            raise ValueError(f"job id {text!r} names more than {MAX_TASKS} tasks")
        indices.update(dict.fromkeys(range(first, last + 1)))
    return JobWord(text, job, tuple(indices))


def parse_ids(words: list[str]) -> list[JobWord]:
    """Every word parsed; the first malformed one raises ``ValueError``."""
    return [parse_id(word) for word in words]


class Resolver:
    """Job ids for words, through the API (one client, its connection reused)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def ids(self, word: JobWord) -> list[int]:
        """The job ids ``word`` names; ``ClientError`` when its array cannot be read, is
        not an array, or lacks an index."""
        if word.indices is None:
            return [word.job]
        first = self.client.request("GET", f"/v1/jobs/{word.job}")
        if first.get("array_id") != word.job:
            raise ClientError(f"job {word.job} is not a job array ({word.text})", 404)
        low, high = _index_range(first)
        wanted = word.indices or tuple(range(low, high + 1))
        missing = [i for i in wanted if not low <= i <= high]
        if missing:
            raise ClientError(
                f"array {word.job} has no task with index {missing[0]} "
                f"(its indices are {low}-{high})",
                404,
            )
        by_index = self._tasks(word.job, high - low + 1)
        absent = [i for i in wanted if i not in by_index]
        if absent:
            raise ClientError(f"task {absent[0]} of array {word.job} not found", 404)
        return [by_index[i] for i in wanted]

    def _tasks(self, array: int, size: int) -> dict[int, int]:
        """``{index: job id}`` of the array's tasks (ids count up from the array's id)."""
        found: dict[int, int] = {}
        before = array + size
        while len(found) < size:
            page: list[dict[str, Any]] = self.client.request(
                "GET", "/v1/jobs", params={"before": before, "limit": min(size, 10000)}
            )
            for job in page:
                if job.get("array_id") == array and job.get("array_index") is not None:
                    found[int(job["array_index"])] = int(job["id"])
            if not page or min(int(j["id"]) for j in page) <= array:
                break
            before = min(int(j["id"]) for j in page)
        return found


def _index_range(first: dict[str, Any]) -> tuple[int, int]:
    """The array's first and last index, from its first task's ``array_index`` and spec."""
    low = int(first.get("array_index") or 0)
    text = str((first.get("spec") or {}).get("array") or low)
    bounds = text.split("%", 1)[0].split("-", 1)
    return low, int(bounds[-1])
