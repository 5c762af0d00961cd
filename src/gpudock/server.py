"""Server bootstrap: home dir, database, executor, nodes, tokens, controller, app.

``open_cluster`` readies the store and registers this node; ``runtime_context``
makes a process's context on it. ``build_server`` wires the whole server in
one process without starting threads or sockets, so tests can build a server
in-process; ``gpudock server`` runs the controller and its API workers as
separate processes (``runtime/workers.py``, ``api/worker.py``).
"""

from __future__ import annotations

import errno
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
from gpudock.metrics.collector import StoreCollector, exposition
from gpudock.runtime import control
from gpudock.runtime.cluster import store_nodes
from gpudock.runtime.context import RuntimeContext
from gpudock.runtime.control import ControlServer
from gpudock.runtime.controller import Controller
from gpudock.runtime.gpu_guard import StoreSink
from gpudock.runtime.host_capacity import node_capacity
from gpudock.runtime.wakeup import Listener, NotifyListener, Sender, SocketListener, forwarding
from gpudock.runtime.workers import Supervisor, WorkerSpec
from gpudock.scheduler.registry import build_profile
from gpudock.services.admin import start_config
from gpudock.store import inventory as inv_store
from gpudock.store import meta as meta_store
from gpudock.store import tokens as token_store
from gpudock.store.db import Database, default_url
from gpudock.store.models import MetaRow, NodeRow
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


@dataclass(frozen=True)
class Opened:
    """What ``open_cluster`` made ready: the store, the nodes registered, the executor
    (checked), the facts every process of the server shares (``WorkerSpec`` carries
    them, not ``db`` or ``executor``)."""

    db: Database
    executor: Executor  # the controller's; an API worker makes its own (``api_context``)
    cluster: bool  # the executor runs many nodes (Swarm): node checks run in their agents
    home: Path
    db_url: str
    base_config: ServerConfig  # the config file's
    config: ServerConfig  # in force: the base with the last applied config on top
    cluster_version: int  # the stored version ``config`` agrees with
    node_name: str
    instance_id: str
    log_dir: Path
    gpus_emulated: bool
    watched_gpus: tuple[str, ...]  # this node's NVML GPUs, for its GPU monitor
    new_admin_token: str | None


def open_cluster(
    home: Path,
    config: ServerConfig,
    db_url: str | None = None,
    emulate_gpus: str | None = None,
    executor: Executor | None = None,
) -> Opened:
    """Open and migrate the store, build the backend's executor, register the nodes, make
    the first admin token.

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
    WARNING line says so (``core.job_defaults.cpu_shortfall``). A multi-node
    engine (Swarm) registers every node it has (``runtime/cluster.py``). A
    scheduling config stored by ``gpudock admin apply`` (or SIGHUP) replaces
    the file's priority classes, queues and this node's labels and taints.
    Raises ``ValueError`` for a scheduler config naming unknown policies, an
    unknown backend, or ``emulate_gpus`` on a multi-node engine.
    """
    build_profile(config.scheduler)  # fail at start, not at the first cycle
    url = db_url or default_url(home)
    make_url(url)  # a malformed --db: ArgumentError, before anything else is done
    kind = type(executor) if executor is not None else executor_class(config.backend)
    multi = issubclass(kind, ExecutorWithNodes)
    if multi and emulate_gpus is not None:
        raise ValueError(
            f"--emulate-gpus declares this host's GPUs for backend docker; on backend "
            f"{config.backend} each node declares its GPUs (NVIDIA-GPU generic resources)"
        )
    inventory = None if multi else _discover(config, emulate_gpus)
    home.mkdir(parents=True, exist_ok=True)
    db = Database.open(url)
    with db.write() as session:
        instance = inv_store.instance_id(session)
    executor = executor or kind.create(config, instance, home)
    executor.prepare()
    if isinstance(executor, ExecutorWithNodes):
        node_name = _register_cluster(db, executor, config.swarm.node_grace)
        in_force = _start_config(db, config, node_name)
    else:
        assert inventory is not None
        node_name = inventory.name
        in_force = _register_host(db, config, inventory, executor)
    now = time.time()
    with db.write() as session:
        new_token = None
        if not token_store.has_admin(session, now):  # none active: a fresh one to recover
            new_token = token_store.create_token(session, "admin", True, now)
        version = meta_store.cluster_version(session)
    if new_token is not None:
        _write_secret(home / ADMIN_TOKEN_FILE, new_token + "\n")
    log_dir = _ready_home(home, config)
    nvml = inventory is not None and inventory.source == "nvml"
    return Opened(
        db=db,
        executor=executor,
        cluster=multi,
        home=home,
        db_url=url,
        base_config=config,
        config=in_force,
        cluster_version=version,
        node_name=node_name,
        instance_id=instance,
        log_dir=log_dir,
        gpus_emulated=inventory is not None and inventory.source == "emulated",
        watched_gpus=tuple(g.uuid for g in inventory.gpus) if nvml and inventory else (),
        new_admin_token=new_token,
    )


def join_cluster(
    home: Path,
    config: ServerConfig,
    db_url: str,
    emulate_gpus: str | None = None,
) -> Opened | None:
    """What a follower (``gpudock server --standby`` on PostgreSQL) serves the API on: the
    store as the leader migrated it, and the facts ``open_cluster`` would find, with
    nothing written (no migration, no node registered, no token made); the leader's
    ``open_cluster`` did all that. None while the schema is not this code's newest
    (the leader has not migrated yet, or runs other code): the standby then waits
    without serving. ``ValueError`` and the executor's ``BackendRefused`` as for
    ``open_cluster``."""
    kind = executor_class(config.backend)
    multi = issubclass(kind, ExecutorWithNodes)
    inventory = None if multi else _discover(config, emulate_gpus)
    db = Database.open(db_url, migrate=False)
    try:
        if not db.at_head():
            db.close()
            return None
        with db.read() as session:
            row = session.get(MetaRow, "instance_id")
            instance = None if row is None else row.value
            version = meta_store.cluster_version(session)
        if instance is None:  # the leader's first start has not got that far
            db.close()
            return None
        executor = kind.create(config, instance, home)
        executor.prepare()
        if isinstance(executor, ExecutorWithNodes):
            local = executor.local_node()
            node_name = next((n.name for n in executor.nodes() if n.engine_id == local), local)
        else:
            assert inventory is not None
            node_name = inventory.name
        with db.read() as session:
            in_force = start_config(session, config, node_name)
    except BaseException:
        db.close()
        raise
    home.mkdir(parents=True, exist_ok=True)
    log_dir = _ready_home(home, config)
    return Opened(
        db=db,
        executor=executor,
        cluster=multi,
        home=home,
        db_url=db_url,
        base_config=config,
        config=in_force,
        cluster_version=version,
        node_name=node_name,
        instance_id=instance,
        log_dir=log_dir,
        gpus_emulated=inventory is not None and inventory.source == "emulated",
        watched_gpus=(),
        new_admin_token=None,
    )


def _ready_home(home: Path, config: ServerConfig) -> Path:
    """The vault's key (made here, before any worker races for it) and the log folder, in
    ``home``; returns the log folder."""
    Vault(home / KEY_FILE).ensure_key()
    log_dir = Path(config.executor.log_dir) if config.executor.log_dir else home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir


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
        in_force = start_config(session, config, node_name)  # the last apply, if any
        traits = replace(in_force.node.traits(), cpus=capacity.cpus, memory=capacity.memory or None)
        inv_store.register_node(session, inventory, now, traits)
        for other in inv_store.disown_other_nodes(session, node_name, now):
            log.warning(
                "node %s is registered but not this host: marked unavailable",
                other,
                extra={"node": other},
            )
    return in_force


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


def runtime_context(
    opened: Opened, process: str = "server", executor: Executor | None = None
) -> RuntimeContext:
    """The ``RuntimeContext`` of a process of the server: ``server`` (API and controller in
    one process), ``controller``, or an API worker (``api_context``)."""
    return RuntimeContext(
        db=opened.db,
        executor=executor or opened.executor,
        config=opened.config,
        base_config=opened.base_config,
        cluster_version=opened.cluster_version,
        node_name=opened.node_name,
        instance_id=opened.instance_id,
        log_dir=opened.log_dir,
        gpus_emulated=opened.gpus_emulated,
        vault=Vault(opened.home / KEY_FILE),
        process=process,
        cluster=opened.cluster,
    )


def make_controller(ctx: RuntimeContext, opened: Opened) -> Controller:
    """The controller on ``ctx``, with the node's GPU monitor (watchdog, health events,
    MPS check; NVML GPUs only, the MPS check always), which starts with it. On a
    multi-node engine (Swarm) there is none: each node's agent runs its checks
    (``agent/node.py``)."""
    if opened.cluster:
        return Controller(ctx, None)
    sink = StoreSink(ctx)
    ctx.fault_note = sink.fault_note
    config = opened.config
    monitor = NodeGpuMonitor(config.gpus, sink, list(opened.watched_gpus), config.executor.sharing)
    return Controller(ctx, monitor)


def build_server(
    home: Path,
    config: ServerConfig,
    db_url: str | None = None,
    emulate_gpus: str | None = None,
    executor: Executor | None = None,
) -> Server:
    """The whole server in this process (``open_cluster``, then the controller and the
    app on one context), wired without starting threads or sockets: for tests, and
    for what ``gpudock server`` splits into processes (``runtime/workers.py``)."""
    opened = open_cluster(home, config, db_url, emulate_gpus, executor)
    ctx = runtime_context(opened)
    loops = make_controller(ctx, opened)
    return Server(ctx, loops, create_app(ctx, loops), opened.new_admin_token)


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


def api_context(spec: WorkerSpec, sender: Sender) -> RuntimeContext:
    """An API worker's context (``api/worker.py``): the store without migrating it (the
    controller did), the config in force read from it, and wake-ups passed to the
    controller through ``sender``. It runs no loops and no lanes."""
    db = Database.open(spec.db_url, migrate=False)
    wakes = forwarding(sender)
    ctx = RuntimeContext(
        db=db,
        executor=executor_class(spec.base_config.backend).create(
            spec.base_config, spec.instance_id, spec.home
        ),
        config=spec.base_config,
        node_name=spec.node_name,
        instance_id=spec.instance_id,
        log_dir=spec.log_dir,
        gpus_emulated=spec.gpus_emulated,
        vault=Vault(spec.home / KEY_FILE),
        process=spec.name,
        wake_scheduler=wakes["scheduler"],
        wake_reconciler=wakes["reconciler"],
        control_address=spec.control_address,
        cluster=issubclass(executor_class(spec.base_config.backend), ExecutorWithNodes),
    )
    with db.read() as session:
        ctx.sync(session)  # the config in force now (the file's until an apply)
    return ctx


def bind(host: str, port: int, retry_for: float = 5.0) -> socket.socket:
    """A TCP socket bound to ``host:port`` for the API workers to share; each worker's
    uvicorn listens on it, so nothing connects before the store is open.

    A port still held for a moment by a server that was just killed (its
    workers die a few milliseconds after it) is tried again for ``retry_for``
    seconds; ``OSError`` after that, or at once for any other failure.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + retry_for
    while True:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        sock.set_inheritable(True)
        return sock


@dataclass
class Split:
    """The controller's process of a server split into API workers (``serve``)."""

    opened: Opened
    ctx: RuntimeContext
    controller: Controller
    supervisor: Supervisor
    wakes: Listener
    control: ControlServer

    def stop(self) -> None:
        """Stop the workers first (no new requests), then the loops and the channels."""
        self.supervisor.stop()
        self.controller.stop()
        self.wakes.stop()
        self.control.stop()
        self.ctx.db.close()


@dataclass
class Following:
    """A follower's process (``follow``): its API workers serve; it runs no controller."""

    opened: Opened
    supervisor: Supervisor
    control: ControlServer

    def stop(self) -> None:
        """Stop the workers, then the control socket, and close the store and the engine's
        connections."""
        self.supervisor.stop()
        self.control.stop()
        self.close()

    def close(self) -> None:
        """Close what only the follower used: its store and its engine connections."""
        self.opened.db.close()
        self.opened.executor.close()


def follow(
    joined: Opened, supervisor: Supervisor, listener: socket.socket, log_level: str, log_format: str
) -> Following:
    """Release the ``supervisor``'s API workers on a follower's store (``join_cluster``):
    they serve reads and submits, and wake the leader through PostgreSQL notifications;
    ``/metrics`` answers the store's families, ``/healthz`` the role ``follower``."""
    ctx = runtime_context(joined, process="controller")
    addr = control.address(joined.instance_id, os.getpid())
    server = ControlServer(addr, lambda: exposition(ctx.metrics, StoreCollector(ctx)), "follower")
    supervisor.release(_worker_spec(joined, listener, None, addr, log_level, log_format))
    return Following(joined, supervisor, server)


def serve(
    opened: Opened,
    supervisor: Supervisor,
    listener: socket.socket,
    wake_pair: tuple[socket.socket, socket.socket] | None,
    log_level: str,
    log_format: str,
    following: Following | None = None,
) -> Split:
    """Start the controller on ``opened`` and release the ``supervisor``'s API workers.

    ``wake_pair`` (SQLite): the wake-up socket pair the workers inherited the
    sending end of; None (PostgreSQL): wake-ups are notifications. ``following``:
    this process was a follower (``follow``) and takes over; its workers serve on,
    and its control socket answers as the leader's from now on.
    """
    ctx = runtime_context(opened, process="controller")
    loops = make_controller(ctx, opened)
    wakes_by_kind = {"scheduler": ctx.wake_scheduler, "reconciler": ctx.wake_reconciler}
    wakes: Listener
    if wake_pair is not None:
        wakes = SocketListener(wake_pair[0], wakes_by_kind, peer=wake_pair[1])
    else:
        url = make_url(opened.db_url).set(drivername="postgresql")
        wakes = NotifyListener(url.render_as_string(hide_password=False), wakes_by_kind)

    def scrape() -> bytes:
        return exposition(ctx.metrics, StoreCollector(ctx))

    if following is not None:
        server = following.control
        server.answer(scrape, "leader")
        following.close()
    else:
        addr = control.address(opened.instance_id, os.getpid())
        server = ControlServer(addr, scrape)
        supervisor.release(  # the workers start serving while the controller's first pass runs
            _worker_spec(opened, listener, wake_pair, addr, log_level, log_format)
        )
    loops.start()
    return Split(opened, ctx, loops, supervisor, wakes, server)


def _worker_spec(
    opened: Opened,
    listener: socket.socket,
    wake_pair: tuple[socket.socket, socket.socket] | None,
    addr: str,
    log_level: str,
    log_format: str,
) -> WorkerSpec:
    return WorkerSpec(
        name="",
        home=opened.home,
        db_url=opened.db_url,
        base_config=opened.base_config,
        node_name=opened.node_name,
        instance_id=opened.instance_id,
        log_dir=opened.log_dir,
        gpus_emulated=opened.gpus_emulated,
        log_level=log_level,
        log_format=log_format,
        listen_fd=listener.fileno(),
        wake_fd=None if wake_pair is None else wake_pair[1].fileno(),
        control_address=addr,
    )
