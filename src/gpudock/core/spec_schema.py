"""The job spec's rules as JSON Schema, so the OpenAPI schema says what validation does.

Each pattern here is the very regular expression a validator checks (the
validators compile these strings), written in the subset that Python and
ECMA-262 read alike. The validators keep their own one-line messages; these
constraints go into the schema through ``json_schema_extra`` only, so
pydantic's generic messages never replace them.

Refusals that depend on the server's state or config (no node could ever
hold the job, an unknown queue or priority class, a mount outside the
admin's allowlist, a driver capability beyond the admin's policy) cannot be
said by a static schema; they answer 422 with a precise message.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Strict

END = r"(?!\n)$"
"""End of text: Python's ``$`` also matches before a final newline, which the validators
(``fullmatch``) refuse; ``(?!\n)`` makes Python read it as ECMA-262 does."""
NAME_PATTERN = rf"^[a-zA-Z0-9][a-zA-Z0-9_.-]{{0,62}}{END}"
"""Job and queue names."""
ENV_KEY_PATTERN = rf"^[A-Za-z_][A-Za-z0-9_]*{END}"
ENV_KEY_ALLOWED_PATTERN = (
    r"^(?!GPUDOCK_)(?!NVIDIA_VISIBLE_DEVICES$)(?!CUDA_VISIBLE_DEVICES$)(?!CUDA_MPS_)"
    rf"(?!NVIDIA_(?!DRIVER_CAPABILITIES$|REQUIRE_CUDA$))[A-Za-z_][A-Za-z0-9_]*{END}"
)
"""A variable name that neither gpudock (``GPUDOCK_*``, ``NVIDIA_VISIBLE_DEVICES``) nor the
GPU env policy (other ``NVIDIA_*`` keys, ``CUDA_VISIBLE_DEVICES``, ``CUDA_MPS_*``) reserves."""
LABEL_KEY_PATTERN = rf"^[a-zA-Z0-9][a-zA-Z0-9_./-]{{0,62}}{END}"
LABEL_KEY_ALLOWED_PATTERN = rf"^(?!gpudock\.)[a-zA-Z0-9][a-zA-Z0-9_./-]{{0,62}}{END}"
AFFINITY_KEY = r"[a-zA-Z0-9](?:[a-zA-Z0-9_./-]{0,61}[a-zA-Z0-9])?"
AFFINITY_VALUE = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?)?"
TOLERATION_PATTERN = rf"^\s*(?:\*|{AFFINITY_KEY}(?:={AFFINITY_VALUE})?)(?::NoSchedule)?\s*$"
"""``key=value[:NoSchedule]``, ``key[:NoSchedule]`` or ``*`` (surrounding blanks ignored)."""
USER_PATTERN = rf"^[a-zA-Z0-9][a-zA-Z0-9_.@-]{{0,63}}{END}"
"""User names given to ``POST /v1/tokens``."""
TOKEN_NAME_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_.@:+ -]{{0,63}}{END}"
"""A token's label (``POST /v1/tokens`` ``name``)."""
_AMOUNT = r"[0-9]+(?:\.[0-9]+)?"
EXPIRES_PATTERN = rf"^(?=[^1-9]*[1-9])\s*(?:{_AMOUNT}|(?:{_AMOUNT}[smhdSMHD])+)\s*{END}"
"""A token's lifetime as text: seconds, or amounts with units (``30d``, ``1h30m``), not zero."""
TAINT_PATTERN = rf"^\s*{AFFINITY_KEY}(?:={AFFINITY_VALUE})?(?::NoSchedule)?\s*$"
"""A node taint: ``key=value[:NoSchedule]`` or ``key[:NoSchedule]`` (blanks around ignored)."""

Number = Annotated[float, Strict()]
"""A JSON number, as the schema says: an integer is a number, ``true`` and ``"2"`` are not."""
Integer = Annotated[int, Strict()]
"""A JSON integer: ``true``, ``2.0`` and ``"2"`` are not."""
Flag = Annotated[bool, Strict()]
"""A JSON boolean: ``1`` and ``"yes"`` are not."""

NUMBER_OR_TEXT: dict[str, Any] = {
    "anyOf": [{"type": "number"}, {"type": "string"}, {"type": "null"}]
}
"""Sizes and durations: a number, or text with a unit (``'8GiB'``, ``'2h'``)."""


def text_map(key_pattern: str, max_text: int) -> dict[str, Any]:
    """``json_schema_extra`` for a ``{key: text}`` field: keys match, values bounded."""
    return {
        "propertyNames": {"pattern": key_pattern},
        "additionalProperties": {"type": "string", "maxLength": max_text},
    }


def node_selector_schema() -> dict[str, Any]:
    """``{key: value}`` or ``["key=value", ...]``, keys and values as labels are."""
    return {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": f"^{AFFINITY_KEY}{END}"},
                "additionalProperties": {"type": "string", "pattern": f"^{AFFINITY_VALUE}{END}"},
            },
            {
                "type": "array",
                "items": {
                    "type": "string",
                    "pattern": rf"^\s*{AFFINITY_KEY}\s*=\s*{AFFINITY_VALUE}\s*$",
                },
            },
        ]
    }
