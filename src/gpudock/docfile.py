"""YAML and JSON files as one-line errors: ``FILE:LINE:COL: message``, as compilers say it.

``load_document`` reads a job file (``gpudock submit -f``), a cluster file
(``gpudock admin apply -f``) or the server's config: JSON when the name ends in
``.json``, else YAML (which reads JSON too). A syntax error is one line naming
the file, the 1-based line and column, and the parser's problem, never the
parser's multi-line dump. ``key_positions`` tells where each top-level key of
such a file is, so an error about a field can point at it. Light: ``yaml`` is
imported on use; no pydantic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class DocumentError(ValueError):
    """A file that cannot be read or parsed; the message is one line."""


def load_document(path: Path) -> Any:
    """The document in ``path`` (None when it is empty YAML); ``DocumentError`` when the
    file cannot be read, is not UTF-8 text, or is not valid YAML or JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DocumentError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"{path}:{exc.lineno}:{exc.colno}: {exc.msg}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        raise DocumentError(f"{where}: {' '.join(problem.split())}") from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"{path}: {' '.join(str(exc).split())}") from None


def key_positions(path: Path) -> dict[str, tuple[int, int]]:
    """``{key: (line, column)}`` (1-based) of the top-level keys of the mapping in
    ``path``; empty when it is not a readable mapping (YAML's reader reads JSON too)."""
    import yaml

    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {
        str(key.value): (key.start_mark.line + 1, key.start_mark.column + 1)
        for key, _ in node.value
        if isinstance(key, yaml.ScalarNode)
    }
