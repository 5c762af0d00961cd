"""HTTP client of the CLI. Reads GPUDOCK_URL / GPUDOCK_TOKEN or $GPUDOCK_HOME/client.json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

from gpudock.store.db import default_home

DEFAULT_URL = "http://127.0.0.1:8470"


class ClientError(Exception):
    """A failed request, with a message fit for the terminal."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


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


class Client:
    def __init__(
        self, url: str | None = None, token: str | None = None, timeout: float = 30
    ) -> None:
        env_url, env_token = load_settings()
        self.url = url or env_url
        token = token or env_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ClientError(
                f"cannot reach the gpudock server at {self.url} ({exc.__class__.__name__}); "
                "is `gpudock server` running? Set GPUDOCK_URL to point elsewhere."
            ) from exc
        _raise_for_error(response)
        return response.json()

    def stream(self, path: str, params: dict[str, Any]) -> Iterator[bytes]:
        try:
            with self._http.stream("GET", path, params=params, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for_error(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ClientError(f"connection to {self.url} lost: {exc}") from exc


def _raise_for_error(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()["error"]
        message = body["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text or response.reason_phrase
    if response.status_code == 401:
        message += " (set GPUDOCK_TOKEN, or run on the server host as the admin)"
    raise ClientError(message, response.status_code)
