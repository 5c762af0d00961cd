"""``gpudock gpu cordon|uncordon UUID`` and ``gpudock mig plan``.

Imports nothing server-side; no rich at all (plain lines).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpudock.cli.common import Output, call, check_output, print_json

gpu_app = typer.Typer(help="Take a GPU out of placement, or bring it back.", no_args_is_help=True)
mig_app = typer.Typer(help="MIG layouts (gpudock never changes one itself).", no_args_is_help=True)


def _health_line(gpu: dict[str, Any]) -> str:
    why = f": {gpu['health_reason']}" if gpu.get("health_reason") else ""
    return f"GPU {gpu['index']} of {gpu['node']} ({gpu['uuid']}) is {gpu['health']}{why}"


@gpu_app.command("cordon")
def cordon(
    uuid: str,
    reason: Annotated[str | None, typer.Option(help="why, for the record")] = None,
    output: Output = "table",
) -> None:
    """Take a GPU out of placement; jobs running on it go on. Admins only."""
    check_output(output)
    gpu = call("POST", f"/v1/gpus/{uuid}/cordon", json={"reason": reason})
    print_json(gpu) if output == "json" else print(_health_line(gpu))


@gpu_app.command("uncordon")
def uncordon(uuid: str, output: Output = "table") -> None:
    """Bring back a cordoned GPU, or one a health event quarantined. Admins only."""
    check_output(output)
    gpu = call("POST", f"/v1/gpus/{uuid}/uncordon")
    print_json(gpu) if output == "json" else print(_health_line(gpu))


@mig_app.command("plan")
def plan(
    want: Annotated[
        list[str] | None,
        typer.Option(help="more demand than pending jobs': PROFILE=COUNT, repeatable"),
    ] = None,
    output: Output = "table",
) -> None:
    """Suggest a MIG layout per GPU for the MIG devices pending jobs ask for.

    Prints the nvidia-smi commands to run on each node; gpudock runs none.
    """
    check_output(output)
    result = call("GET", "/v1/mig/plan", params={"want": want or []})
    if output == "json":
        print_json(result)
        return
    for profile, count in sorted(result["kept"].items()):
        print(f"{count} x {profile}: served by idle MIG devices that exist")
    node = None
    for layout in result["layouts"]:
        if layout["node"] != node:
            node = layout["node"]
            print(f"# on node {node}:")
        print(f"# GPU {layout['index']} ({layout['name']}, {layout['uuid']}): {layout['layout']}")
        for command in layout["commands"]:
            print(command)
    for unmet in result["unmet"]:
        print(f"{unmet['count']} x {unmet['profile']} not served: {unmet['reason']}")
    if not (result["layouts"] or result["kept"] or result["unmet"]):
        print("no MIG demand: no pending job asks for a MIG device (add some with --want)")
