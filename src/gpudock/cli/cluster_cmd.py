"""``gpudock node | swarm | agent | job``: a cluster on Docker Swarm.

* ``gpudock node drain|cordon|uncordon NODE`` set Swarm's availability
  (``drain``, ``pause``, ``active``) through the server (admins);
* ``gpudock swarm deploy-agent IMAGE`` runs the node agent on every node as a
  Swarm global service (admins);
* ``gpudock agent --server URL --token T`` is the node agent itself (a host
  process; ``deploy/systemd/gpudock-agent.service``);
* ``gpudock job requeue ID [--force]`` is ``gpudock requeue`` under the
  ``job`` group, as the cluster docs spell it.

Light at import (``gpudock.cli.common``); the agent loads its modules when it runs.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from gpudock.cli.common import Output, call, check_output, fail, print_json
from gpudock.cli.control_cmd import hold, release, requeue, update

node_app = typer.Typer(
    help="Drain, cordon or uncordon a Swarm node (admins).", no_args_is_help=True
)
swarm_app = typer.Typer(help="The cluster on Docker Swarm.", no_args_is_help=True)
job_app = typer.Typer(help="Controls on one job (as the top-level commands).", no_args_is_help=True)
for _control in (hold, release, requeue, update):
    job_app.command()(_control)

Node = Annotated[str, typer.Argument(help="the node's name, as `gpudock nodes` lists it")]


def _availability(action: str, name: str, output: str) -> None:
    check_output(output)
    node = call("POST", f"/v1/nodes/{name}/{action}")
    if output == "json":
        print_json(node)
        return
    print(f"node {name}: availability {node['availability']} ({node['status']})")


@node_app.command("drain")
def drain(name: Node, output: Output = "table") -> None:
    """No new jobs on NODE; its running jobs go on (Swarm availability drain)."""
    _availability("drain", name, output)


@node_app.command("cordon")
def cordon(name: Node, output: Output = "table") -> None:
    """No new jobs on NODE; its running jobs go on (Swarm availability pause)."""
    _availability("cordon", name, output)


@node_app.command("uncordon")
def uncordon(name: Node, output: Output = "table") -> None:
    """NODE takes new jobs again (Swarm availability active)."""
    _availability("uncordon", name, output)


@swarm_app.command("deploy-agent")
def deploy_agent(
    image: Annotated[str, typer.Argument(help="an image whose entrypoint is gpudock")],
    server_url: Annotated[
        str | None,
        typer.Option(
            help="the URL agents reach the server at, or every replica's, comma-separated; "
            "default: the one you use"
        ),
    ] = None,
    docker_socket: Annotated[
        str, typer.Option(help="each node's Docker engine socket (the same path on every host)")
    ] = "/var/run/docker.sock",
) -> None:
    """Run the node agent on every Swarm node, as a global service (admins)."""
    from gpudock.cli.client import Client

    url = server_url or Client().url
    body = {"image": image, "server_url": url, "docker_socket": docker_socket}
    result = call("POST", "/v1/swarm/agent", json=body)
    print(f"agent service {result['service']} deployed; its tasks enroll with {url}")


def agent(
    server: Annotated[
        str,
        typer.Option(
            help="the gpudock server's URL; or every replica's, comma-separated (it reports "
            "to the one that answers)",
            envvar="GPUDOCK_URL",
        ),
    ],
    token: Annotated[
        str | None,
        typer.Option(
            help="this node's token (gpudock token create --node NODE)",
            envvar="GPUDOCK_AGENT_TOKEN",
        ),
    ] = None,
    enroll_file: Annotated[
        Path | None,
        typer.Option(help="an enrollment token's file (the Swarm agent service uses it)"),
    ] = None,
    docker_url: Annotated[
        str | None, typer.Option(help="the node's Docker engine; default: the local socket")
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(help="serve the node's GPU gauges here; 0: not at all", min=0, max=65535)
    ] = 9471,
    metrics_host: Annotated[str, typer.Option(help="address of /metrics")] = "0.0.0.0",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """The node agent: reports this node to the server, fences it, serves its GPU gauges."""
    from gpudock.agent.runner import Agent, AgentSettings
    from gpudock.logfmt import configure

    if (token is None) == (enroll_file is None):
        fail("give --token (a node token) or --enroll-file (Swarm agent service), not both", 2)
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        fail(f"--log-level must be debug, info, warning or error; got {log_level!r}", 2)
    if not server.replace(",", "").strip():
        fail("--server needs at least one URL", 2)
    configure(log_level, "text")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = AgentSettings(
        server=server,
        token=token,
        enroll_file=enroll_file,
        docker_url=docker_url,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Agent(settings).run(stop)


def register(app: typer.Typer) -> None:
    """Add these commands to the ``gpudock`` app."""
    app.add_typer(node_app, name="node")
    app.add_typer(swarm_app, name="swarm")
    app.add_typer(job_app, name="job")
    app.command("agent")(agent)


__all__ = ["Output", "register"]
