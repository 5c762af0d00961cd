"""``gpudock admin get|apply|diff``: the live scheduling config over ``/v1/admin/config``.

Imports nothing server-side; the YAML file is read here and sent as JSON
(sizes such as ``320GiB`` and durations such as ``7d`` are read by the server).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpudock.cli.common import call, fail, print_json, usage
from gpudock.docfile import DocumentError, load_document

admin_app = typer.Typer(help="Administer the cluster's scheduling config.", no_args_is_help=True)

ConfigFile = Annotated[
    Path,
    typer.Option(
        "--file", "-f", help="cluster YAML: priority_classes, queues, nodes (labels, taints)"
    ),
]
Format = Annotated[str, typer.Option("--output", "-o", help="yaml or json")]


def read_document(path: Path) -> dict[str, Any]:
    """The YAML (or JSON) mapping in ``path``; a clear error (exit 2) otherwise, a syntax
    error as ``FILE:LINE:COL: problem``."""
    try:
        data = load_document(path)
    except DocumentError as exc:
        fail(str(exc), 2)
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(f"{path} must hold a mapping (priority_classes, queues, nodes)", 2)
    return data


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def change_lines(changes: list[dict[str, Any]]) -> list[str]:
    """``+ path: after``, ``- path: before``, ``~ path: before -> after``; one per change."""
    lines = []
    for change in changes:
        path, before, after = change["path"], change["before"], change["after"]
        if before is None:
            lines.append(f"+ {path}: {_show(after)}")
        elif after is None:
            lines.append(f"- {path}: {_show(before)}")
        else:
            lines.append(f"~ {path}: {_show(before)} -> {_show(after)}")
    return lines


@admin_app.command("get")
def admin_get(output: Format = "yaml") -> None:
    """Print the scheduling config in force (admin only), ready for ``admin apply -f``."""
    if output not in ("yaml", "json"):
        usage(f"--output must be 'yaml' or 'json', got {output!r}")
    result = call("GET", "/v1/admin/config")
    if output == "json":
        print_json(result)
        return
    import yaml

    by = result["applied_by"] or "the config file"
    sys.stdout.write(f"# version {result['version']} ({result['source']}, by {by})\n")
    sys.stdout.write(yaml.safe_dump(result["config"], sort_keys=False, allow_unicode=True))


@admin_app.command("diff")
def admin_diff(file: ConfigFile) -> None:
    """Print what ``admin apply -f FILE`` would change (checked by the same rules)."""
    result = call("POST", "/v1/admin/config/diff", json=read_document(file))
    lines = change_lines(result["changes"])
    sys.stdout.write("\n".join(lines) + "\n" if lines else "no changes\n")


@admin_app.command("apply")
def admin_apply(file: ConfigFile) -> None:
    """Replace the scheduling config with FILE's, in one step (refused whole on any error)."""
    result = call("PUT", "/v1/admin/config", json=read_document(file))
    for line in change_lines(result["changes"]):
        sys.stdout.write(line + "\n")
    count = len(result["changes"])
    changes = "1 change" if count == 1 else f"{count} changes"
    sys.stdout.write(f"applied config version {result['version']} ({changes})\n")
