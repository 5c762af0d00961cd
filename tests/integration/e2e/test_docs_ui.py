"""/docs in a real browser, offline: Swagger UI renders, takes a token and calls the API.

Every request to an origin other than the server's is aborted (and recorded), so
the page works only if the server itself serves every asset it needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from tests.kit.browser import OfflinePage
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, submit

JOBS_LIST = "#operations-jobs-list_jobs_v1_jobs_get"


def execute(page: Any) -> str:
    """Press Execute on the open operation; the status code the page then shows."""
    operation = page.locator(JOBS_LIST)
    status = operation.locator(".live-responses-table tr.response .response-col_status").first
    clear = operation.locator("button.btn-clear")
    if clear.count():  # the previous response goes first, so the code read is this one's
        clear.click()
        status.wait_for(state="detached")
    operation.locator("button.execute").click()
    status.wait_for()
    text: str = status.inner_text().strip()
    return text


def test_docs_work_offline_and_try_it_out_uses_the_token(
    make_server: Callable[..., ServerProcess], offline_page: Callable[[str], OfflinePage]
) -> None:
    server = make_server().start()
    alice_token = server.api().post("/v1/tokens", json={"user": "alice"}).json()["token"]
    submit(server.api(alice_token), image=TEST_IMAGE, command=["true"], name="docs-probe")

    docs = offline_page(server.url)
    page = docs.page
    page.goto(server.url + "/docs")
    title = page.locator(".swagger-ui .info .title")
    try:
        title.wait_for()
    except PlaywrightError as exc:
        raise AssertionError(f"/docs did not render (outside URLs: {docs.blocked})") from exc
    assert title.inner_text().startswith("gpudock")

    # Try it out without a token: the server's own 401.
    page.locator(f"{JOBS_LIST} .opblock-summary").click()
    page.locator(f"{JOBS_LIST} button.try-out__btn").click()
    assert execute(page) == "401"

    # Authorize with alice's token: Swagger UI then sends it on every /v1 call.
    page.locator(".auth-wrapper button.authorize").click()
    dialog = page.locator(".dialog-ux .modal-ux")
    dialog.locator("input").fill(alice_token)
    dialog.locator("button.authorize").click()
    dialog.locator("button", has_text="Logout").wait_for()  # accepted: "Authorized"
    assert "Authorized" in dialog.inner_text()
    dialog.locator("button.btn-done").click()

    assert execute(page) == "200"
    body = page.locator(f"{JOBS_LIST} .live-responses-table .response-col_description pre").first
    assert '"name": "docs-probe"' in body.inner_text()
    curl = page.locator(f"{JOBS_LIST} .curl-command").inner_text()
    assert re.search(rf"Authorization: Bearer {re.escape(alice_token)}", curl)

    assert docs.blocked == [], f"/docs asked for outside URLs: {docs.blocked}"
    assert not [e for e in docs.errors if "Content Security Policy" in e], docs.errors
    assert any("/static-offline-docs/swagger-ui-bundle.js" in url for url in docs.requests)


def test_redoc_renders_offline(
    make_server: Callable[..., ServerProcess], offline_page: Callable[[str], OfflinePage]
) -> None:
    server = make_server().start()
    redoc = offline_page(server.url)
    redoc.page.goto(server.url + "/redoc")
    heading = redoc.page.locator("h1").first
    heading.wait_for()
    assert heading.inner_text().startswith("gpudock")
    redoc.page.locator("h2", has_text="List Jobs").first.wait_for(state="visible")
    assert redoc.blocked == [], f"/redoc asked for outside URLs: {redoc.blocked}"
    # ReDoc's sidebar logo points at its CDN: the page's policy refuses it in the browser.
    refused = [e for e in redoc.errors if "Content Security Policy" in e]
    assert all("cdn.redoc.ly/redoc/logo-mini.svg" in e for e in refused), refused
