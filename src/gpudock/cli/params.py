"""Plain parameter conversion for typer, without pydantic.

typer (0.29) converts every parameter's value through a pydantic ``TypeAdapter``,
even a default ``int``: importing pydantic and building the adapters costs several
times what the rest of ``gpudock jobs`` does. ``install()`` gives typer's parameters
a plain conversion for the simple annotations the CLI uses (``str``, ``int``,
``float``, ``Path``, and ``list`` of them) when nothing else is asked of them (no
``min``/``max``, ``parser``, path checks, ...); every other parameter keeps typer's
own. ``tests/integration/e2e/test_cli_client.py`` checks that no client command
loads pydantic, so a typer upgrade that changes these internals fails there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer import core
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import RuntimeParam
from typer._typing import get_args, get_origin

NAMES = {int: "integer", float: "number", str: "text", Path: "path", bool: "boolean"}
BOOLS = {"1": True, "true": True, "t": True, "yes": True, "y": True, "on": True,
         "0": False, "false": False, "f": False, "no": False, "n": False, "off": False}  # fmt: skip
PLAIN_INFO = {"parser": None, "min": None, "max": None, "exists": False, "resolve_path": False,
              "allow_dash": False, "file_okay": True, "dir_okay": True, "writable": False,
              "path_type": None}  # fmt: skip
"""ParameterInfo attributes at these values ask nothing beyond the type."""


class PlainParam(RuntimeParam):
    """``int(value)``, ``float(value)``, ``Path(value)``, ``str(value)``; a list item by item."""

    def _coerce_value(self, value: Any, param: Any, ctx: Context) -> Any:
        leaf: Any = self.annotation
        if get_origin(leaf) is list:
            (leaf,) = get_args(leaf)
            return [_convert(leaf, item, param, ctx) for item in value]
        return _convert(leaf, value, param, ctx)


def _convert(kind: Any, value: Any, param: Any, ctx: Context) -> Any:
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise BadParameter(
            f"{value!r} is not a valid {NAMES[kind]}.", ctx=ctx, param=param
        ) from None


def plain(descriptor: Any) -> bool:
    """True when the parameter is a simple type with no further constraints."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None:
        return False
    if any(getattr(info, k, v) != v for k, v in PLAIN_INFO.items()):
        return False
    leaf: Any = descriptor.annotation
    if get_origin(leaf) is list:
        args = get_args(leaf)
        leaf = args[0] if len(args) == 1 else None
    return leaf in NAMES


def install() -> None:
    """Make typer's parameters convert simple values without pydantic (idempotent)."""
    cls: Any = core._TyperParameter
    if getattr(cls, "_gpudock_plain", False):
        return
    original = cls.get_runtime_param

    def get_runtime_param(self: Any) -> RuntimeParam:
        if self._runtime_param is None and plain(self.type_descriptor):
            d = self.type_descriptor
            self._runtime_param = PlainParam(
                parameter_info=d.parameter_info, annotation=d.annotation
            )
        return original(self)  # type: ignore[no-any-return]

    cls.get_runtime_param = get_runtime_param
    cls._gpudock_plain = True
