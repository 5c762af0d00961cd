"""``NVIDIA_REQUIRE_*``: which drivers and GPUs an image says it can run on.

The grammar is the NVIDIA container toolkit's (libnvidia-container, "Constraints"):

* a constraint is ``KEY OP VALUE``: keys ``cuda`` and ``driver`` (versions),
  ``arch`` (compute capability, e.g. ``8.0``) and ``brand`` (e.g. ``tesla``);
  operators ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``;
* comma-separated constraints are ANDed, space-separated groups are ORed:
  ``cuda>=12.2 brand=tesla,driver>=470,driver<471`` runs where the driver
  supports CUDA 12.2, or on a Tesla with a 470 driver (the forward-compatibility
  package of CUDA images);
* every ``NVIDIA_REQUIRE_*`` variable of the image (and the job's env) must
  hold; ``NVIDIA_DISABLE_REQUIRE`` set to a true value turns all of them off.

``ImageRequirements.check(facts)`` answers for one GPU of one node. Pure.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

KEYS = ("cuda", "driver", "arch", "brand")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}
_CONSTRAINT_RE = re.compile(r"^([a-z]+)(>=|<=|!=|>|<|=)([A-Za-z0-9._-]+)$")
_TRUE = {"1", "true", "yes", "on"}
Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """``12.4`` → ``(12, 4)``; ``550.54.15`` → ``(550, 54, 15)``; ``ValueError`` otherwise."""
    parts = text.strip().split(".")
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a version such as 12.4")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What a constraint is checked against, for one GPU of one node.

    ``cuda``: the newest CUDA its driver supports (``nvmlSystemGetCudaDriverVersion``);
    ``driver``: the driver version; ``arch``: compute capability; ``brand``: the
    toolkit's brand name (``tesla``, ``nvidia``, ``geforce``...). None: unknown.
    """

    cuda: Version | None = None
    driver: Version | None = None
    arch: Version | None = None
    brand: str | None = None

    @classmethod
    def of(
        cls, cuda: str | None, driver: str | None, arch: str | None, brand: str | None
    ) -> GpuFacts:
        """From the inventory's text (node ``cuda_version``, ``driver_version``; GPU
        ``arch``, ``brand``); text that is no version counts as unknown."""
        return cls(_maybe(cuda), _maybe(driver), _maybe(arch), brand.lower() if brand else None)


@dataclass(frozen=True, slots=True)
class Constraint:
    key: str
    op: str
    value: str

    def fails(self, facts: GpuFacts) -> bool:
        """True when ``facts`` surely break the constraint: a known fact that does not meet
        it (an unknown one may)."""
        known = facts.brand if self.key == "brand" else getattr(facts, self.key)
        return known is not None and not self.holds(facts)

    def holds(self, facts: GpuFacts) -> bool:
        """True when ``facts`` meet the constraint; an unknown fact never does."""
        if self.key == "brand":
            return facts.brand is not None and _OPS[self.op](facts.brand, self.value.lower())
        have: Version | None = getattr(facts, self.key)
        if have is None:
            return False
        want = parse_version(self.value)
        width = max(len(have), len(want))  # 12.4 == 12.4.0
        return _OPS[self.op](_pad(have, width), _pad(want, width))

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``NVIDIA_REQUIRE_*`` value: any alternative (all of its constraints) will do."""

    alternatives: tuple[tuple[Constraint, ...], ...]

    def holds(self, facts: GpuFacts) -> bool:
        return any(all(c.holds(facts) for c in group) for group in self.alternatives)

    def fails(self, facts: GpuFacts) -> bool:
        """True when no alternative can hold: each has a constraint ``facts`` surely break."""
        return all(any(c.fails(facts) for c in group) for group in self.alternatives)

    def min_cuda(self) -> Version | None:
        """The least ``cuda>=``/``cuda>`` version the alternatives ask for (for reasons)."""
        found = [
            parse_version(c.value)
            for group in self.alternatives
            for c in group
            if c.key == "cuda" and c.op in (">=", ">", "=")
        ]
        return min(found) if found else None


def parse_requirement(text: str) -> Requirement:
    """Parse one ``NVIDIA_REQUIRE_*`` value; ``ValueError`` naming the bad constraint."""
    groups = []
    for word in text.split():
        group = []
        for part in word.split(","):
            match = _CONSTRAINT_RE.fullmatch(part.strip())
            if match is None or match[1] not in KEYS:
                raise ValueError(
                    f"constraint {part!r} must be KEY OP VALUE with KEY one of "
                    f"{', '.join(KEYS)} and OP one of {', '.join(_OPS)}"
                )
            if match[1] != "brand":
                parse_version(match[3])
            group.append(Constraint(match[1], match[2], match[3]))
        groups.append(tuple(group))
    return Requirement(tuple(groups))


@dataclass(frozen=True, slots=True)
class ImageRequirements:
    """Every ``NVIDIA_REQUIRE_*`` of an image (and job), by variable name; all must hold."""

    requirements: Mapping[str, Requirement]

    def check(self, facts: GpuFacts) -> str | None:
        """None when every requirement holds for ``facts``, else why not (one line)."""
        for name, requirement in sorted(self.requirements.items()):
            if requirement.holds(facts):
                continue
            need = requirement.min_cuda()
            if need is not None and (facts.cuda is None or facts.cuda < need):
                have = "an unknown CUDA" if facts.cuda is None else _text(facts.cuda)
                return f"image needs CUDA ≥ {_text(need)}; driver supports {have}"
            return f"{name} is not met ({_describe(requirement)})"
        return None

    def refuses(self, facts: GpuFacts) -> str | None:
        """Why ``facts`` surely break a requirement (facts not known may hold: a node's
        CUDA and driver versions are known, its GPUs' brand may not be), or None. What
        the scheduler filters nodes by (``policies/cuda_compat.py``)."""
        for name, requirement in sorted(self.requirements.items()):
            if not requirement.fails(facts):
                continue
            need = requirement.min_cuda()
            if need is not None and facts.cuda is not None and facts.cuda < need:
                return f"image needs CUDA ≥ {_text(need)}; driver supports {_text(facts.cuda)}"
            return f"{name} is not met ({_describe(requirement)})"
        return None

    def min_cuda(self) -> Version | None:
        found = [v for r in self.requirements.values() if (v := r.min_cuda()) is not None]
        return max(found) if found else None

    def text(self) -> str:
        """One line per variable, ``NAME=value`` in its canonical form, sorted: what the
        store keeps of a job's image (``requirements_of``: the same requirements back)."""
        return "\n".join(
            f"{name}={_as_value(req)}" for name, req in sorted(self.requirements.items())
        )


@lru_cache(maxsize=1024)
def requirements_of(text: str) -> ImageRequirements | None:
    """The requirements ``ImageRequirements.text`` wrote (None when it holds none);
    ``ValueError`` for text that does not parse."""
    return image_requirements(parse_env_list(text.splitlines()))


def image_requirements(env: Mapping[str, str]) -> ImageRequirements | None:
    """The requirements in an image's (or job's) ``env``; None when there are none or
    ``NVIDIA_DISABLE_REQUIRE`` is true. ``ValueError`` for a value that does not parse,
    naming the variable."""
    if env.get("NVIDIA_DISABLE_REQUIRE", "").strip().lower() in _TRUE:
        return None
    found: dict[str, Requirement] = {}
    for name, value in env.items():
        if not name.startswith("NVIDIA_REQUIRE_") or not value.strip():
            continue
        try:
            found[name] = parse_requirement(value)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    return ImageRequirements(found) if found else None


def parse_env_list(items: list[str] | None) -> dict[str, str]:
    """``["K=V", ...]`` (``docker image inspect``'s ``Config.Env``) as a dict; later wins."""
    env: dict[str, str] = {}
    for item in items or ():
        key, _, value = item.partition("=")
        env[key] = value
    return env


def _maybe(text: str | None) -> Version | None:
    try:
        return None if text is None else parse_version(text)
    except ValueError:
        return None


def _pad(version: Version, width: int) -> Version:
    return version + (0,) * (width - len(version))


def _text(version: Version) -> str:
    return ".".join(str(p) for p in version)


def _as_value(requirement: Requirement) -> str:
    """The requirement as ``NVIDIA_REQUIRE_*`` text: alternatives by spaces."""
    return " ".join(",".join(str(c) for c in group) for group in requirement.alternatives)


def _describe(requirement: Requirement) -> str:
    return " or ".join(",".join(str(c) for c in group) for group in requirement.alternatives)
