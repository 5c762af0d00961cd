"""Server bootstrap: home dir, database, discovery, tokens, executor, controller, app.

``build_server`` wires everything without starting threads or sockets, so
tests can build a server in-process; ``serve`` runs it under uvicorn.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path

from fastapi import FastAPI
from sqlalchemy.engine import make_url

from gpudock.api.app import create_app
from gpudock.config import ServerConfig
from gpudock.core.job_defaults import cpu_shortfall
from gpudock.executors.base import Executor
from gpudock.executors.docker import DockerExecutor, default_client_factory
from gpudock.gpus import apply_declared_topology, discover
from gpudock.gpus.node_monitor import NodeGpuMonitor
from gpudock.runtime.context import RuntimeContext
from gpudock.runtime.controller import Controller
from gpudock.runtime.gpu_guard import StoreSink
from gpudock.runtime.host_capacity import node_capacity
from gpudock.scheduler.registry import build_profile
from gpudock.services.admin import start_config
from gpudock.store import inventory as inv_store
from gpudock.store import tokens as token_store
from gpudock.store.db import Database, default_url
from gpudock.vault import KEY_FILE, Vault

log = logging.getLogger("gpudock.server")

ADMIN_TOKEN_FILE = "admin-token"
CLIENT_CONFIG_FILE = "client.json"


@dataclass
class Server:
    ctx: RuntimeContext
    controller: Controller
    app: FastAPI
    new_admin_token: str | None  # set when no admin token was active (the first start)


def build_server(
    home: Path,
    config: ServerConfig,
    db_url: str | None = None,
    emulate_gpus: str | None = None,
    executor: Executor | None = None,
) -> Server:
    """Open and migrate the store, register this node's GPUs, wire the runtime.

    Everything that can be checked without the database is checked first (the
    scheduler profile, the database URL's form, the ``--emulate-gpus`` spec,
    the node's topology), so a mistake there touches no database. When the
    node's CPUs let fewer jobs that ask for no CPUs run at once than it has
    GPUs, one WARNING line says so (``core.job_defaults.cpu_shortfall``).

    The node is registered with the config's ``node`` labels, taints and CPU
    cores (unset: its engine host's, as is its memory: ``host_capacity.py``),
    and its declared ``node.topology`` replaces the discovered one (declared
    GPU indices the node lacks are logged as a WARNING and ignored). A
    scheduling config stored by ``gpudock admin apply`` (or SIGHUP) replaces
    the file's priority classes, queues and this node's labels and taints.
    The node's GPU monitor (watchdog, health events, MPS check; NVML GPUs
    only, the MPS check always) starts with the controller.
    Raises ``ValueError`` for a scheduler config naming unknown policies.
    """
    build_profile(config.scheduler)  # fail at start, not at the first cycle
    url = db_url or default_url(home)
    make_url(url)  # a malformed --db: ArgumentError, before anything else is done
    node_name = config.node_name or socket.gethostname()
    inventory = discover(node_name, emulate_gpus)  # a bad --emulate-gpus: before the database
    if (declared := config.node.topology) is not None:
        inventory = apply_declared_topology(
            inventory, declared.groups_of("nvlink"), declared.groups_of("numa")
        )
    if inventory.note:
        log.info("%s", inventory.note)
    capacity = node_capacity(config, lambda: default_client_factory(config.executor)().info())
    short = cpu_shortfall(len(inventory.gpus), capacity.cpus, config.job_defaults)
    if short is not None:
        log.warning("node %s: %s", node_name, short, extra={"node": node_name})
    home.mkdir(parents=True, exist_ok=True)
    db = Database.open(url)
    now = time.time()
    with db.write() as session:
        config = start_config(session, config, node_name)  # the last apply, if any, is in force
        instance = inv_store.instance_id(session)
        traits = replace(config.node.traits(), cpus=capacity.cpus, memory=capacity.memory or None)
        inv_store.register_node(session, inventory, now, traits)
        for other in inv_store.disown_other_nodes(session, node_name, now):
            log.warning(
                "node %s is registered but not this host: marked unavailable",
                other,
                extra={"node": other},
            )
        new_token = None
        if not token_store.has_admin(session, now):  # none active: a fresh one to recover
            new_token = token_store.create_token(session, "admin", True, now)
    if new_token is not None:
        _write_secret(home / ADMIN_TOKEN_FILE, new_token + "\n")
    log_dir = Path(config.executor.log_dir) if config.executor.log_dir else home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    ctx = RuntimeContext(
        db=db,
        executor=executor or DockerExecutor(config.executor, instance, home=home),
        config=config,
        node_name=node_name,
        instance_id=instance,
        log_dir=log_dir,
        gpus_emulated=inventory.source == "emulated",
        vault=Vault(home / KEY_FILE),
    )
    sink = StoreSink(ctx)
    ctx.fault_note = sink.fault_note
    watched = [g.uuid for g in inventory.gpus] if inventory.source == "nvml" else []
    monitor = NodeGpuMonitor(config.gpus, sink, watched, config.executor.sharing)
    controller = Controller(ctx, monitor)
    return Server(ctx, controller, create_app(ctx, controller), new_token)


def write_client_config(home: Path, host: str, port: int) -> Path:
    """Write ``client.json`` (URL + admin token) so the local admin's CLI just works."""
    url_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    data: dict[str, str] = {"url": f"http://{url_host}:{port}"}
    token_file = home / ADMIN_TOKEN_FILE
    if token_file.exists():
        data["token"] = token_file.read_text().strip()
    path = home / CLIENT_CONFIG_FILE
    _write_secret(path, json.dumps(data, indent=2) + "\n")
    return path


def _write_secret(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)
