"""The executor registry: the backend named in the config (``backend:``) builds the executor.

A new backend is one module with a ``create`` factory plus one line here;
the server (``server.py``) names no concrete executor. Modules are imported
only when their backend is chosen, so a docker server never loads Swarm's.

::

    backend: docker   →  gpudock.executors.docker:create   one host, its own engine
    backend: swarm    →  gpudock.executors.swarm:create    the Swarm this host manages

A factory is ``create(config, instance_id, home) -> Executor``: ``config``
the whole ``ServerConfig``, ``instance_id`` the installation's id (it labels
every container), ``home`` the server's state directory. It must not touch
the engine; ``Executor.prepare`` checks the engine when the server starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import cast

from gpudock.config import ServerConfig
from gpudock.executors.base import Executor

ExecutorFactory = Callable[[ServerConfig, str, Path], Executor]

EXECUTORS: dict[str, str] = {
    "docker": "gpudock.executors.docker:create",
    "swarm": "gpudock.executors.swarm:create",
}
"""Backend name → ``module:factory``."""


def backend_names() -> list[str]:
    return sorted(EXECUTORS)


def create_executor(config: ServerConfig, instance_id: str, home: Path) -> Executor:
    """The executor of ``config.backend``; ``ValueError`` naming the known ones if unknown."""
    target = EXECUTORS.get(config.backend)
    if target is None:
        raise ValueError(f"unknown backend {config.backend!r}; known: {', '.join(backend_names())}")
    module, _, name = target.partition(":")
    factory = cast(ExecutorFactory, getattr(importlib.import_module(module), name))
    return factory(config, instance_id, home)
