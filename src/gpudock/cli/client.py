"""HTTP client of the CLI. Reads GPUDOCK_URL / GPUDOCK_TOKEN or $GPUDOCK_HOME/client.json.

Standard library only (``http.client``, imported on the first request, so that
``gpudock --help`` does not pay for it): every ``gpudock`` call pays for what it
imports, and an HTTP library costs more to import than the request takes. One
connection per ``Client``, kept alive across its requests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from gpudock.home import default_home

if TYPE_CHECKING:
    import http.client

DEFAULT_URL = "http://127.0.0.1:8470"


class ClientError(Exception):
    """A failed request, with a message fit for the terminal."""

    def __init__(
        self, message: str, status: int | None = None, code: str = "", field: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code  # the server's ``error.code``, e.g. ``InvalidInput``
        self.field = field  # the server's ``error.field``: the input to blame (comma-joined)

    @property
    def exit_code(self) -> int:
        """2 for input the server refused as invalid (422), 1 for anything else, a job
        that can never run (422 ``Infeasible``) included: its input was well formed."""
        return 2 if self.status == 422 and self.code != "Infeasible" else 1


def load_settings() -> tuple[str, str | None]:
    """URL and token: environment first, then the file ``gpudock server`` wrote."""
    url = os.environ.get("GPUDOCK_URL")
    token = os.environ.get("GPUDOCK_TOKEN")
    path = default_home() / "client.json"
    if (url is None or token is None) and path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        url = url or data.get("url")
        token = token or data.get("token")
    return (url or DEFAULT_URL).rstrip("/"), token


def query_string(params: dict[str, Any] | None) -> str:
    """``?a=1&state=X&state=Y`` (lists repeat the key, booleans are ``true``/``false``)."""
    if not params:
        return ""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            pairs.append((key, text))
    return "?" + urlencode(pairs)


class Client:
    """Requests to the gpudock API; every failure is a ``ClientError``."""

    def __init__(
        self, url: str | None = None, token: str | None = None, timeout: float = 30
    ) -> None:
        env_url, env_token = load_settings()
        self.url = url or env_url
        token = token or env_token
        self.timeout = timeout
        self.headers = {"Accept": "application/json", "User-Agent": "gpudock-cli"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ClientError(f"GPUDOCK_URL {self.url!r} must look like http://HOST:PORT")
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        import http.client

        if self._conn is None:
            cls = (
                http.client.HTTPSConnection
                if self._scheme == "https"
                else http.client.HTTPConnection
            )
            self._conn = cls(self._host, self._port)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        body: Any,
        timeout: float | None,
    ) -> http.client.HTTPResponse:
        import http.client

        headers = dict(self.headers)
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        target = self._prefix + path + query_string(params)
        try:
            conn = self._connection(timeout)
            try:
                conn.request(method, target, body=payload, headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()  # a kept-alive connection the server closed: once more, afresh
                conn.request(method, target, body=payload, headers=headers)
                return conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ClientError(
                f"cannot reach the gpudock server at {self.url} ({_why(exc)}); "
                "is `gpudock server` running? Set GPUDOCK_URL to point elsewhere."
            ) from exc

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> Any:
        """The decoded JSON body of a successful response."""
        import http.client

        response = self._send(method, path, params, json, self.timeout)
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ClientError(f"connection to {self.url} lost: {_why(exc)}") from exc
        _raise_for_error(response.status, response.reason, data)
        return _loads(data) if data else None

    def stream(
        self, path: str, params: dict[str, Any] | None, method: str = "GET", json: Any = None
    ) -> Iterator[bytes]:
        """The body of a response as it arrives (no timeout: a log stream may idle for hours)."""
        import http.client

        response = self._send(method, path, params, json, None)
        try:
            if response.status >= 400:
                _raise_for_error(response.status, response.reason, response.read())
            while chunk := response.read1(65536):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise ClientError(f"connection to {self.url} lost: {_why(exc)}") from exc
        finally:
            self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _why(exc: BaseException) -> str:
    import socket

    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror}"
    return str(exc) or exc.__class__.__name__


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ClientError(f"the server sent a body that is not JSON: {data[:80]!r}") from exc


def _raise_for_error(status: int, reason: str, data: bytes) -> None:
    if status < 400:
        return
    try:
        body = json.loads(data)["error"]
        message, code = body["message"], str(body.get("code") or "")
        field = body.get("field") if isinstance(body.get("field"), str) else None
    except (ValueError, KeyError, TypeError, AttributeError):
        message, code, field = data.decode(errors="replace") or reason, "", None
    if status == 401:
        message += " (set GPUDOCK_TOKEN, or run on the server host as the admin)"
    raise ClientError(str(message), status, code, field)
