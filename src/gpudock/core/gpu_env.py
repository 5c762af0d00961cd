"""Who decides what the NVIDIA container toolkit sees: gpudock and the admin, not the job.

The toolkit reads its instructions from the container's environment, so a job
that could set them could widen its own access. The rules, for a job's
``env``:

- ``NVIDIA_VISIBLE_DEVICES`` and ``GPUDOCK_*``: gpudock's own (refused by ``JobSpec``).
- ``NVIDIA_DRIVER_CAPABILITIES``: admin policy (``executor.driver_capabilities``);
  a job may ask for a subset, never more.
- ``NVIDIA_REQUIRE_CUDA``: allowed (it only narrows where the job may start).
- every other ``NVIDIA_*`` key and ``CUDA_VISIBLE_DEVICES``: refused.
- ``CUDA_MPS_*``: gpudock's (the MPS memory and compute limits, the pipe
  directory): refused, so a job can never lift its own limits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

DRIVER_CAPABILITIES_KEY = "NVIDIA_DRIVER_CAPABILITIES"
ALLOWED_NVIDIA_KEYS = frozenset({DRIVER_CAPABILITIES_KEY, "NVIDIA_REQUIRE_CUDA"})
KNOWN_CAPABILITIES = ("compute", "compat32", "display", "graphics", "ngx", "utility", "video")
_USER_RE = re.compile(r"^(\d{1,10}):(\d{1,10})$")
MPS_PREFIX = "CUDA_MPS_"


def _refused(key: str) -> bool:
    """A key only gpudock or the admin may set (see the module docstring)."""
    return (
        key == "CUDA_VISIBLE_DEVICES"
        or key.startswith(MPS_PREFIX)
        or (key.startswith("NVIDIA_") and key not in ALLOWED_NVIDIA_KEYS)
    )


class EnvRefused(ValueError):
    """A job env key or value that the policy forbids; the message names the key."""


def parse_capabilities(text: str) -> tuple[str, ...]:
    """``"compute, utility"`` → ``("compute", "utility")``; ``all`` expands to every one.

    Raises ``ValueError`` for an unknown or empty list. Order follows
    ``KNOWN_CAPABILITIES``, so equal sets print alike.
    """
    names = {part.strip() for part in text.split(",") if part.strip()}
    if not names:
        raise ValueError("driver capabilities must not be empty")
    if "all" in names:
        return KNOWN_CAPABILITIES
    unknown = sorted(names - set(KNOWN_CAPABILITIES))
    if unknown:
        raise ValueError(
            f"unknown driver capabilities {', '.join(unknown)} "
            f"(known: {', '.join(KNOWN_CAPABILITIES)}, all)"
        )
    return tuple(c for c in KNOWN_CAPABILITIES if c in names)


def check_container_user(text: str) -> str:
    """Validate ``uid:gid`` (numeric, neither 0) and return it; ``ValueError`` otherwise."""
    match = _USER_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"user {text!r} must be numeric 'uid:gid', e.g. '1000:1000'")
    if int(match[1]) == 0 or int(match[2]) == 0:
        raise ValueError(f"user {text!r} must not be root (uid 0 or gid 0)")
    return f"{int(match[1])}:{int(match[2])}"


def check_job_env(env: Mapping[str, str], policy: str) -> None:
    """Raise ``EnvRefused`` naming the first key that ``env`` may not set.

    ``policy`` is the admin's ``executor.driver_capabilities``.
    """
    for key, value in env.items():
        if key.startswith(MPS_PREFIX):
            raise EnvRefused(
                f"env key {key!r} is not allowed: gpudock sets the MPS limits of a job "
                "(its gpu_memory and gpu_compute) and the MPS pipe; a job cannot change them"
            )
        if _refused(key):
            raise EnvRefused(
                f"env key {key!r} is not allowed: gpudock sets which GPUs a job sees "
                f"(allowed NVIDIA keys: {', '.join(sorted(ALLOWED_NVIDIA_KEYS))})"
            )
        if key == DRIVER_CAPABILITIES_KEY:
            allowed = parse_capabilities(policy)
            try:
                wanted = parse_capabilities(value)
            except ValueError as exc:
                raise EnvRefused(f"env key {key!r}: {exc}") from None
            extra = [c for c in wanted if c not in allowed]
            if extra:
                raise EnvRefused(
                    f"env key {key!r} asks for {', '.join(extra)}, beyond what this server "
                    f"allows ({', '.join(allowed)}); give a subset of those"
                )


def driver_capabilities(env: Mapping[str, str], policy: str) -> str:
    """The ``NVIDIA_DRIVER_CAPABILITIES`` a container gets: the job's ask within the policy.

    Never wider than ``policy``. A job that asked for nothing, or (submitted
    under an older policy) for nothing the policy still allows, gets the policy.
    """
    allowed = parse_capabilities(policy)
    text = env.get(DRIVER_CAPABILITIES_KEY)
    if text is None:
        return ",".join(allowed)
    try:
        wanted = parse_capabilities(text)
    except ValueError:
        return ",".join(allowed)
    narrowed = [c for c in wanted if c in allowed]
    return ",".join(narrowed or allowed)


def launch_env(env: Mapping[str, str], policy: str) -> dict[str, str]:
    """``env`` without the keys the policy refuses, capabilities clamped to ``policy``.

    Defence in depth at launch, for jobs stored before the policy (or under a
    wider one); submit already refused such keys.
    """
    result = {key: value for key, value in env.items() if not _refused(key)}
    result[DRIVER_CAPABILITIES_KEY] = driver_capabilities(env, policy)
    return result
