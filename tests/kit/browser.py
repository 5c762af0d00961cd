"""A real browser for tests: Playwright driving Debian's ``chromium``, kept offline.

``scripts/lib.sh`` (``ensure_packages``) installs ``chromium``; the ``playwright``
package comes from the ``dev`` extra. ``playwright install`` is never run: it
downloads a browser of its own, which cannot be fetched here. Under ``CI=true`` a
missing Chromium or Playwright fails the test; elsewhere it skips.

``OfflinePage`` is the seam every browser test goes through: a fresh browser
context whose requests to any origin but the server's are aborted and recorded,
so a test can assert that the page needed nothing from outside.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tests.kit.docker import unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Error, Page, Route

CHROMIUM = os.environ.get("GPUDOCK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
TIMEOUT_MS = 30_000  # per action; a loaded 2-core machine renders Swagger UI in seconds


def chromium_path() -> str:
    """The Chromium executable; fail (CI) or skip when it is not installed."""
    path = shutil.which(CHROMIUM)
    if path is None:
        unavailable(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    assert path is not None
    return path


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    """A headless Chromium under Playwright, closed on exit."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        unavailable(f"playwright is not installed ({exc}); pip install -e '.[dev]'")
    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS, timeout=TIMEOUT_MS
        )
        try:
            yield browser
        finally:
            browser.close()


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class OfflinePage:
    """A page in its own context that may reach only ``origin``.

    Every request elsewhere (a CDN, a font, a validator) is aborted before it
    leaves the browser and its URL kept in ``blocked``; ``requests`` lists every
    URL the page asked for, in order. ``errors`` keeps the console's errors and
    uncaught exceptions (a Content-Security-Policy refusal shows there, since
    the browser refuses such a request before it is made).
    """

    def __init__(
        self, browser: Browser, origin: str, viewport: tuple[int, int] = (1280, 900)
    ) -> None:
        self.origin = origin_of(origin)
        self.blocked: list[str] = []
        self.requests: list[str] = []
        self.errors: list[str] = []
        width, height = viewport
        self.context: BrowserContext = browser.new_context(
            viewport={"width": width, "height": height}
        )
        self.context.set_default_timeout(TIMEOUT_MS)
        self.context.route("**/*", self._route)
        self.page: Page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", self._uncaught)

    def _route(self, route: Route) -> None:
        url = route.request.url
        self.requests.append(url)
        if origin_of(url) == self.origin:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort("blockedbyclient")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def _uncaught(self, error: Error) -> None:
        self.errors.append(f"uncaught: {error}")

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """Save a PNG at ``path`` (folders created) and return it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def resize(self, width: int, height: int) -> None:
        """Change the viewport (1440x900 desktop, 390x844 phone in the UI tests)."""
        self.page.set_viewport_size({"width": width, "height": height})

    def close(self) -> None:
        self.context.close()


def artifacts_dir(fallback: Path) -> Path:
    """Where a test leaves screenshots: ``$GPUDOCK_ARTIFACTS`` if set, else ``fallback``."""
    root = os.environ.get("GPUDOCK_ARTIFACTS")
    path = Path(root) if root else fallback
    path.mkdir(parents=True, exist_ok=True)
    return path
