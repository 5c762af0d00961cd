"""The answers every operation may give, documented once for the whole schema.

Some errors do not belong to one route: a missing or bad token (401) on every
operation that takes one, a body over ``api.max_body_bytes`` (413) on every
operation with a body, and a database outage (503 with ``Retry-After``) on
every operation. ``common_errors`` adds them to the generated OpenAPI schema,
so a new endpoint is documented correctly without repeating them; a route's own
entry for the same status (a 503 with another body, say) is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
_METHODS = ("get", "put", "post", "delete", "patch", "options", "head")


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if headers:
        response["headers"] = headers
    return response


UNAUTHORIZED = _error("no token, or an unknown, expired or revoked one")
TOO_LARGE = _error("the request body is over the server's limit (api.max_body_bytes)")
UNAVAILABLE = _error(
    "the database is unavailable; send the request again later",
    {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
)


def common_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with 401/413/503 added where they apply (in place; also returned)."""
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in _METHODS:
                continue
            responses = operation.setdefault("responses", {})
            if operation.get("security"):
                responses.setdefault("401", UNAUTHORIZED)
            if "requestBody" in operation:
                responses.setdefault("413", TOO_LARGE)
            responses.setdefault("503", UNAVAILABLE)
    return schema


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the schema with ``common_errors`` applied (cached)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = common_errors(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
