"""Where gpudock keeps its state: ``$GPUDOCK_HOME``, else ``~/.local/share/gpudock``.

Standard library only: the CLI reads ``client.json`` from here on every call, so this
module must stay as cheap to import as ``os``.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """``$GPUDOCK_HOME``, else ``~/.local/share/gpudock``."""
    env = os.environ.get("GPUDOCK_HOME")
    return Path(env) if env else Path.home() / ".local" / "share" / "gpudock"
