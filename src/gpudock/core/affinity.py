"""Node labels, taints and tolerations, and GPU-topology requirements.

Kubernetes semantics, reduced to what a GPU cluster needs:

* a job's ``node_selector`` (``{key: value}``) admits only nodes carrying
  every one of those labels;
* a node's taint ``key=value:NoSchedule`` (or ``key:NoSchedule``) keeps off
  every job that does not tolerate it;
* a toleration ``key=value`` tolerates taints with that key and value,
  ``key`` (or ``key:NoSchedule``) any value of the key, and ``*`` every taint.
  An effect, when given, must equal the taint's.

Only the ``NoSchedule`` effect exists: gpudock never evicts a running job for
a taint added later (``NoExecute``), and soft preferences
(``PreferNoSchedule``) are not modelled. Anything else is refused when
parsed, so a setting is never silently ignored.

``topology`` on a job requires its GPUs to share one NVLink domain
(``nvlink``) or one NUMA node (``numa``); without it the GPU picker still
prefers such sets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

EFFECTS = ("NoSchedule",)
TOPOLOGIES = ("nvlink", "numa")
Topology = Literal["nvlink", "numa"]

_KEY_RE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9_./-]{0,61}[a-zA-Z0-9])?$")
_VALUE_RE = re.compile(r"^([a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?)?$")


def check_label(key: str, value: str) -> None:
    """Raise ``ValueError`` unless ``key``/``value`` are valid label (or taint) parts."""
    if not _KEY_RE.fullmatch(key):
        raise ValueError(
            f"label key {key!r} must be 1-63 letters, digits or '_./-', "
            "starting and ending with a letter or digit"
        )
    if not _VALUE_RE.fullmatch(value):
        raise ValueError(
            f"label value {value!r} for {key!r} must be at most 63 letters, digits or '_.-', "
            "starting and ending with a letter or digit"
        )


@dataclass(frozen=True, slots=True, order=True)
class Taint:
    """``key=value:effect`` on a node: jobs that do not tolerate it stay off."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True, order=True)
class Toleration:
    """Tolerates taints of ``key`` (every key when ``*``), of ``value`` when given."""

    key: str
    value: str | None = None  # None: any value (Kubernetes' Exists)
    effect: str | None = None  # None: any effect

    def tolerates(self, taint: Taint) -> bool:
        if self.key != "*" and self.key != taint.key:
            return False
        if self.value is not None and self.value != taint.value:
            return False
        return self.effect is None or self.effect == taint.effect

    def __str__(self) -> str:
        value = "" if self.value is None else f"={self.value}"
        effect = "" if self.effect is None else f":{self.effect}"
        return f"{self.key}{value}{effect}"


def _split(text: str, what: str) -> tuple[str, str | None, str | None]:
    """``key[=value][:effect]`` into its parts, each checked."""
    text = text.strip()
    body, _, effect = text.partition(":")
    key, eq, value = body.partition("=")
    if effect and effect not in EFFECTS:
        raise ValueError(
            f"{what} {text!r}: effect must be {' or '.join(EFFECTS)}, got {effect!r} "
            "(gpudock never evicts running jobs for taints)"
        )
    if ":" in text and not effect:
        raise ValueError(f"{what} {text!r}: empty effect after ':'")
    if key != "*":
        check_label(key, value)
    elif eq:
        raise ValueError(f"{what} {text!r}: '*' tolerates every taint and takes no value")
    return key, (value if eq else None), (effect or None)


def parse_taint(text: str) -> Taint:
    """``key=value:NoSchedule``, ``key:NoSchedule`` or ``key=value`` (NoSchedule implied)."""
    key, value, effect = _split(text, "taint")
    if key == "*":
        raise ValueError(f"taint {text!r}: '*' is only valid in a toleration")
    return Taint(key, value or "", effect or "NoSchedule")


def parse_toleration(text: str) -> Toleration:
    """``key=value[:effect]``, ``key[:effect]`` (any value) or ``*`` (everything)."""
    key, value, effect = _split(text, "toleration")
    return Toleration(key, value, effect)


def parse_selector(pairs: Mapping[str, str] | Iterable[str]) -> tuple[tuple[str, str], ...]:
    """A node selector from ``{key: value}`` or ``["key=value", ...]``, sorted, checked."""
    items: list[tuple[str, str]] = []
    if isinstance(pairs, Mapping):
        items = [(str(k), str(v)) for k, v in pairs.items()]
    else:
        for text in pairs:
            key, eq, value = text.partition("=")
            if not eq:
                raise ValueError(f"node selector {text!r} must look like key=value")
            items.append((key.strip(), value.strip()))
    for key, value in items:
        check_label(key, value)
    keys = [k for k, _ in items]
    if len(set(keys)) != len(keys):
        raise ValueError("node selector names a label key twice")
    return tuple(sorted(items))


def selector_matches(
    selector: Iterable[tuple[str, str]], labels: Iterable[tuple[str, str]]
) -> bool:
    """True when ``labels`` carry every ``key=value`` of ``selector``."""
    have = dict(labels)
    return all(have.get(k) == v for k, v in selector)


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> list[Taint]:
    """The taints no toleration tolerates (empty: the job may go there)."""
    tols = tuple(tolerations)
    return [t for t in taints if not any(tol.tolerates(t) for tol in tols)]
