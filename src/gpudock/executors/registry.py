"""The executor registry: the backend named in the config (``backend:``) builds the executor.

A new backend is one module with an ``Executor`` subclass plus one line
here; the server (``server.py``) names no concrete executor. Modules are
imported only when their backend is chosen, so a docker server never loads
Swarm's.

::

    backend: docker   →  gpudock.executors.docker:DockerExecutor   one host, its own engine
    backend: swarm    →  gpudock.executors.swarm:SwarmExecutor     the Swarm this host manages

Each class builds itself with ``create(config, instance_id, home)``
(``Executor.create``): ``config`` the whole ``ServerConfig``, ``instance_id``
the installation's id (it labels every container), ``home`` the server's
state directory. It must not touch the engine; ``Executor.prepare`` checks
the engine when the server starts. Whether it runs many nodes is its class's
(``ExecutorWithNodes``), known before anything is built.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from gpudock.config import ServerConfig
from gpudock.executors.base import Executor

EXECUTORS: dict[str, str] = {
    "docker": "gpudock.executors.docker:DockerExecutor",
    "swarm": "gpudock.executors.swarm:SwarmExecutor",
}
"""Backend name → ``module:class``."""


def backend_names() -> list[str]:
    return sorted(EXECUTORS)


def executor_class(backend: str) -> type[Executor]:
    """The executor class of ``backend``; ``ValueError`` naming the known ones if unknown."""
    target = EXECUTORS.get(backend)
    if target is None:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(backend_names())}")
    module, _, name = target.partition(":")
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, type) and issubclass(found, Executor)
    return found


def create_executor(config: ServerConfig, instance_id: str, home: Path) -> Executor:
    """The executor of ``config.backend``, built (``ValueError`` for an unknown backend)."""
    return executor_class(config.backend).create(config, instance_id, home)
