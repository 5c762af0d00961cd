"""Map every error to a JSON body ``{"error": {code, message, field}}``; never a trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpudock.core.errors import GpudockError, InvalidInput

log = logging.getLogger("gpudock.api")


def error_response(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse(
        status_code=status, content={"error": {"code": code, "message": message, "field": field}}
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GpudockError)
    async def _domain(_: Request, exc: GpudockError) -> JSONResponse:
        field = exc.field if isinstance(exc, InvalidInput) else None
        return error_response(exc.status_code, type(exc).__name__, exc.message, field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
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
                msg = "expected a JSON object, sent with Content-Type: application/json"
            messages.append(f"{field}: {msg}")
            fields.append(field)
        return error_response(422, "InvalidInput", "; ".join(messages), ",".join(fields))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "HTTPError", str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "InternalError", "internal server error; see the server log")
