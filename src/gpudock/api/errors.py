"""Map every error to a JSON body ``{"error": {code, message, field}}``; never a trace."""

from __future__ import annotations

import functools
import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpudock.api.limits import BodyTooLarge
from gpudock.core.errors import GpudockError, InvalidInput, Unavailable
from gpudock.logfmt import request_id
from gpudock.store.db import database_unavailable

log = logging.getLogger("gpudock.api")


DB_RETRY_AFTER = 2  # seconds a client is asked to wait while the database is down


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={"error": {"code": code, "message": message, "field": field}},
        headers=headers,
    )


def unavailable_response(message: str, retry_after: int = DB_RETRY_AFTER) -> JSONResponse:
    """503 ``Unavailable`` with ``Retry-After``: the request may be sent again."""
    return error_response(503, "Unavailable", message, headers={"Retry-After": str(retry_after)})


def allowed_methods(request: Request) -> list[str]:
    """Every method the API serves on the request's path (the ``Allow`` of a 405).

    The framework names only the first route whose path matched; a path served
    by several routes (``GET`` and ``POST /v1/jobs``) must list them all. Read
    from the OpenAPI paths (built once per app), so it stays true as routes
    are added.
    """
    path = request.url.path
    methods: set[str] = set()
    paths = request.app.openapi().get("paths", {})
    if path in paths:  # a literal path is its own resource (``/v1/jobs/estimates``)
        paths = {path: paths[path]}
    for template, operations in paths.items():
        if _template_regex(template).fullmatch(path):
            methods |= {m.upper() for m in operations if m.upper() in _HTTP_METHODS}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


_HTTP_METHODS = {"GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", "HEAD"}


@functools.cache
def _template_regex(template: str) -> re.Pattern[str]:
    """``/v1/jobs/{job_id}`` -> a regex matching one path segment per parameter."""
    parts = re.split(r"(\{[^}]+\})", template)
    pattern = "".join(
        ("[^/]+" if not part.endswith(":path}") else ".*")
        if part.startswith("{")
        else re.escape(part)
        for part in parts
    )
    return re.compile(pattern)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GpudockError)
    async def _domain(_: Request, exc: GpudockError) -> JSONResponse:
        if isinstance(exc, Unavailable):
            return unavailable_response(exc.message, exc.retry_after)
        field = exc.field if isinstance(exc, InvalidInput) else None
        return error_response(exc.status_code, type(exc).__name__, exc.message, field)

    @app.exception_handler(DBAPIError)
    @app.exception_handler(PoolTimeout)
    async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        if not database_unavailable(exc):
            return await _unexpected(request, exc)
        request.app.state.ctx.db.availability.failed(exc)  # logged once per outage
        log.debug("503 on %s %s: the database is down", _method(request), request.url.path)
        return unavailable_response("the database is unavailable; retry shortly")

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        if _literal_path_misrouted(request, exc):
            return _method_not_allowed(request)
        messages, fields = [], []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"] if p not in ("body", "query", "path")]
            field = ".".join(loc) or "body"
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            elif err["type"] == "missing":
                msg = "field required"
            elif err["type"] == "json_invalid":  # loc is ("body", offset)
                field = "body"
                detail = (err.get("ctx") or {}).get("error", "")
                msg = f"invalid JSON at character {err['loc'][-1]}: {detail}".rstrip(": ")
            elif tuple(err["loc"]) == ("body",) and err["type"] == "model_attributes_type":
                msg = not_an_object(request.headers.get("content-type"), err.get("input"))
            messages.append(f"{field}: {msg}")
            fields.append(field)
        return error_response(422, "InvalidInput", "; ".join(messages), ",".join(fields))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:
            # FastAPI's "There was an error parsing the body": the body is not text
            # (not UTF-8) or not decodable; the contract says 422, naming the body.
            cause = exc.__cause__
            if isinstance(cause, BodyTooLarge):
                return error_response(413, "PayloadTooLarge", str(cause), "body")
            detail = (
                f"not UTF-8 text ({cause.reason} at byte {cause.start})"
                if isinstance(cause, UnicodeDecodeError)
                else "could not be parsed as JSON"
            )
            return error_response(422, "InvalidInput", f"body: {detail}", "body")
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            return _method_not_allowed(request, headers)
        return error_response(exc.status_code, "HTTPError", str(exc.detail), headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", _method(request), request.url.path)
        rid = request_id.get()  # the outermost handler: RequestId's header never gets here
        return error_response(
            500,
            "InternalError",
            "internal server error; see the server log" + (f" (request id {rid})" if rid else ""),
            headers={"X-Request-ID": rid} if rid else None,
        )


def _method_not_allowed(request: Request, headers: dict[str, str] | None = None) -> JSONResponse:
    headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    return error_response(405, "HTTPError", "Method Not Allowed", headers=headers)


def _literal_path_misrouted(request: Request, exc: RequestValidationError) -> bool:
    """A path parameter refused a path that a route serves literally: ``PATCH
    /v1/jobs/estimates`` reached ``PATCH /v1/jobs/{job_id}`` because estimates has no
    PATCH. That is a method the path lacks (405), not a bad job id (422)."""
    if not any(err["loc"][:1] == ("path",) for err in exc.errors()):
        return False
    return request.url.path in request.app.openapi().get("paths", {})


def not_an_object(content_type: str | None, sent: object) -> str:
    """Why a body that must be a JSON object was refused: the Content-Type it came
    with, or what JSON value it held."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        given = f"Content-Type: {media}" if media else "no Content-Type"
        hint = (
            "; a YAML config goes through `gpudock admin apply FILE`, which sends it as JSON"
            if "yaml" in media
            else ""
        )
        return f"expected a JSON object sent with Content-Type: application/json, got {given}{hint}"
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "true or false"}
    kind = "null" if sent is None else kinds.get(type(sent), "a number")
    return f"expected a JSON object, got {kind}"


def _method(request: Request) -> str:
    """The HTTP method; ``WEBSOCKET`` for an upgrade (the handlers also answer those)."""
    return str(request.scope.get("method", "WEBSOCKET"))
