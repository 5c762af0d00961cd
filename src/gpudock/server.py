"""Server bootstrap: home dir, database, executor, nodes, tokens, controller, app.

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
from sqlalchemy import select
from sqlalchemy.engine import make_url

from gpudock.api.app import create_app
from gpudock.config import ServerConfig
from gpudock.core.inventory import NodeInventory
from gpudock.core.job_defaults import cpu_shortfall
from gpudock.executors.base import Executor, ExecutorWithNodes
from gpudock.executors.registry import executor_class
from gpudock.gpus import apply_declared_topology, discover
from gpudock.gpus.node_monitor import NodeGpuMonitor
from gpudock.runtime.cluster import store_nodes
from gpudock.runtime.context import RuntimeContext
from gpudock.runtime.controller import Controller
from gpudock.runtime.gpu_guard import StoreSink
from gpudock.runtime.host_capacity import node_capacity
from gpudock.scheduler.registry import build_profile
from gpudock.services.admin import start_config
from gpudock.store import inventory as inv_store
from gpudock.store import tokens as token_store
from gpudock.store.db import Database, default_url
from gpudock.store.models import NodeRow
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
    """Open and migrate the store, build the backend's executor, register the nodes, wire
    the runtime.

    The executor is the config's ``backend`` (``executors/registry.py``).
    Everything that can be checked without the database is checked first (the
    scheduler profile, the database URL's form, the backend's name, the
    ``--emulate-gpus`` spec, the node's topology), so a mistake there touches
    no database; then the executor checks its engine (``Executor.prepare``:
    ``BackendRefused`` names what is wrong).

    A one-host engine registers this host: its GPUs, the config's ``node``
    labels, taints and CPU cores (unset: its engine host's, as is its memory:
    ``host_capacity.py``), its declared ``node.topology`` (declared GPU
    indices the node lacks are logged as a WARNING and ignored); when its CPUs
    let fewer jobs that ask for no CPUs run at once than it has GPUs, one
    WARNING line says so (``core.job_defaults.cpu_shortfall``); its GPU
    monitor (watchdog, health events, MPS check; NVML GPUs only, the MPS check
    always) starts with the controller. A multi-node engine (Swarm) registers
    every node it has (``runtime/cluster.py``); node-side checks run in its
    nodes' agents. A scheduling config stored by ``gpudock admin apply`` (or
    SIGHUP) replaces the file's priority classes, queues and this node's
    labels and taints. Raises ``ValueError`` for a scheduler config naming
    unknown policies, an unknown backend, or ``emulate_gpus`` on a multi-node
    engine.
    """
    build_profile(config.scheduler)  # fail at start, not at the first cycle
    url = db_url or default_url(home)
    make_url(url)  # a malformed --db: ArgumentError, before anything else is done
    kind = type(executor) if executor is not None else executor_class(config.backend)
    multi = issubclass(kind, ExecutorWithNodes)
    inventory = None if multi else _discover(config, emulate_gpus)
    if multi and emulate_gpus is not None:
        raise ValueError(
            f"--emulate-gpus declares this host's GPUs for backend docker; on backend "
            f"{config.backend} each node declares its GPUs (NVIDIA-GPU generic resources)"
        )
    home.mkdir(parents=True, exist_ok=True)
    db = Database.open(url)
    with db.write() as session:
        instance = inv_store.instance_id(session)
    executor = executor or kind.create(config, instance, home)
    executor.prepare()
    if isinstance(executor, ExecutorWithNodes):
        node_name = _register_cluster(db, executor, config.swarm.node_grace)
        config = _start_config(db, config, node_name)
    else:
        assert inventory is not None
        node_name = inventory.name
        config = _register_host(db, config, inventory, executor)
    new_token = _admin_token(db)
    if new_token is not None:
        _write_secret(home / ADMIN_TOKEN_FILE, new_token + "\n")
    log_dir = Path(config.executor.log_dir) if config.executor.log_dir else home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    ctx = RuntimeContext(
        db=db,
        executor=executor,
        config=config,
        node_name=node_name,
        instance_id=instance,
        log_dir=log_dir,
        gpus_emulated=inventory is not None and inventory.source == "emulated",
        vault=Vault(home / KEY_FILE),
        cluster=multi,
    )
    monitor = None
    if inventory is not None:  # a Swarm node's checks run in its agent (agent/node.py)
        sink = StoreSink(ctx)
        ctx.fault_note = sink.fault_note
        watched = [g.uuid for g in inventory.gpus] if inventory.source == "nvml" else []
        monitor = NodeGpuMonitor(config.gpus, sink, watched, config.executor.sharing)
    controller = Controller(ctx, monitor)
    return Server(ctx, controller, create_app(ctx, controller), new_token)


def _discover(config: ServerConfig, emulate_gpus: str | None) -> NodeInventory:
    """This host's GPUs (NVML, or emulated), its declared topology applied."""
    node_name = config.node_name or socket.gethostname()
    inventory = discover(node_name, emulate_gpus)  # a bad --emulate-gpus: before the database
    if (declared := config.node.topology) is not None:
        inventory = apply_declared_topology(
            inventory, declared.groups_of("nvlink"), declared.groups_of("numa")
        )
    if inventory.note:
        log.info("%s", inventory.note)
    return inventory


def _register_host(
    db: Database, config: ServerConfig, inventory: NodeInventory, executor: Executor
) -> ServerConfig:
    """Register this host as the only node; return the config in force."""
    node_name = inventory.name
    capacity = node_capacity(config, executor.engine_info)
    short = cpu_shortfall(len(inventory.gpus), capacity.cpus, config.job_defaults)
    if short is not None:
        log.warning("node %s: %s", node_name, short, extra={"node": node_name})
    now = time.time()
    with db.write() as session:
        config = start_config(session, config, node_name)  # the last apply, if any, is in force
        traits = replace(config.node.traits(), cpus=capacity.cpus, memory=capacity.memory or None)
        inv_store.register_node(session, inventory, now, traits)
        for other in inv_store.disown_other_nodes(session, node_name, now):
            log.warning(
                "node %s is registered but not this host: marked unavailable",
                other,
                extra={"node": other},
            )
    return config


def _register_cluster(db: Database, executor: ExecutorWithNodes, grace: float) -> str:
    """Register every node of a multi-node engine; return the name of the server's own."""
    engine = executor.nodes()
    local = executor.local_node()
    name = next((n.name for n in engine if n.engine_id == local), local)
    store_nodes(db, engine, grace, time.time())
    with db.read() as session:
        for row in session.scalars(select(NodeRow).where(NodeRow.engine_id.is_(None))):
            log.warning("node %s is registered but not in the swarm", row.name)
    log.info("swarm of %d nodes; this server runs on node %s", len(engine), name)
    return name


def _start_config(db: Database, config: ServerConfig, node_name: str) -> ServerConfig:
    with db.write() as session:
        return start_config(session, config, node_name)


def _admin_token(db: Database) -> str | None:
    """A fresh admin token when none is active (the first start, or a recovery)."""
    with db.write() as session:
        if token_store.has_admin(session, time.time()):
            return None
        return token_store.create_token(session, "admin", True, time.time())


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
