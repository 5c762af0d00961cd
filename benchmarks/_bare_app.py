"""The bare FastAPI app that ``api_floor.py`` measures gpudock against.

One sync dependency reading a header, one sync endpoint returning
``{"jobs": []}`` at gpudock's path (no response model to check it against),
served by uvicorn exactly as gpudock serves its API
(``gpudock.api.serving.uvicorn_config``: the same event loop, HTTP parser and
logging). Not a benchmark itself (its name starts with ``_``).
Run: ``python benchmarks/_bare_app.py PORT``.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, Header


def caller(authorization: Annotated[str | None, Header()] = None) -> str | None:
    return authorization


def create() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/jobs", response_model=None)  # no response check: the cheapest FastAPI does
    def jobs(_: Annotated[str | None, Depends(caller)], limit: int = 100) -> dict[str, Any]:
        return {"jobs": []}

    return app


def main(port: int) -> None:
    try:
        from gpudock.api.serving import uvicorn_config
    except ImportError:  # a gpudock from before serving.py: it ran uvicorn's defaults
        config = uvicorn.Config(create(), host="127.0.0.1", port=port, log_level="warning")
    else:
        config = uvicorn_config(create(), "warning", False, host="127.0.0.1", port=port)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main(int(sys.argv[1]))
