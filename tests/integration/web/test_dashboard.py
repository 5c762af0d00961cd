"""The web dashboard in real Chromium against a real server with emulated GPUs.

An admin logs in with a token and sees the emulated GPUs; a job submitted
through the API appears and reaches RUNNING without a reload; its detail page
follows its logs, and another job's page shows its pending reason; a user sees
only their own jobs; a cookie-authenticated change without the UI's header is
refused. Screenshots at 1440x900 and 390x844 are saved for a human to look at.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.kit.browser import OfflinePage
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, job_state, submit, wait_for, wait_state

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.docker
DESKTOP, PHONE = (1440, 900), (390, 844)
TICKER = ["sh", "-c", 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.3; done']
UI_SHOWS_WITHIN_MS = 2_000  # the bound on live refresh


def token(server: ServerProcess, user: str) -> str:
    with server.api() as admin:
        response = admin.post("/v1/tokens", json={"user": user})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


@pytest.fixture(scope="module")
def alice(server: ServerProcess) -> str:
    return token(server, "alice")


@pytest.fixture
def admin_page(browser: Browser, server: ServerProcess) -> Iterator[OfflinePage]:
    page = OfflinePage(browser, server.url, viewport=DESKTOP)
    log_in(page, server.url, server.admin_token)
    yield page
    assert page.blocked == [], "the dashboard fetched something from outside the server"
    page.close()


def log_in(page: OfflinePage, url: str, secret: str) -> None:
    page.page.goto(url + "/ui/")
    page.page.fill("#token", secret)
    page.page.click("button[type=submit]")
    page.page.wait_for_selector("nav a.active")


def shoot(page: OfflinePage, shots: Path, name: str) -> None:
    """Screenshots at desktop and phone size; the page must not show raw JSON."""
    body = page.page.inner_text("body")
    assert not re.search(r'[{\[]\s*"\w+"\s*:', body), f"raw JSON on {name}: {body[:300]}"
    for label, (width, height) in (("desktop", DESKTOP), ("phone", PHONE)):
        page.resize(width, height)
        page.page.wait_for_timeout(300)
        page.screenshot(shots / f"{name}-{label}.png")
    page.resize(*DESKTOP)


def test_a_bad_token_is_refused_and_the_admin_sees_every_emulated_gpu(
    browser: Browser, server: ServerProcess, shots: Path
) -> None:
    page = OfflinePage(browser, server.url, viewport=DESKTOP)
    page.page.goto(server.url + "/ui/")
    page.page.fill("#token", "gpd_not-a-token")
    page.page.click("button[type=submit]")
    page.page.wait_for_selector("#login-error:has-text('invalid')")
    shoot(page, shots, "login")

    log_in(page, server.url, server.admin_token)
    cells = page.page.locator(".gpu")
    cells.first.wait_for()
    assert cells.count() == 4
    assert page.page.locator(".gpu .tag.emu").count() == 4
    cells.first.hover()
    assert "NVIDIA H100" in (cells.first.get_attribute("title") or "")
    cookie = next(c for c in page.context.cookies() if c["name"] == "gpudock_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.page.evaluate("document.cookie") == "", "the token must not be readable by scripts"
    assert page.blocked == []
    page.close()


def test_a_submitted_job_appears_and_reaches_running_without_a_reload(
    admin_page: OfflinePage, server: ServerProcess, alice: str, shots: Path
) -> None:
    page = admin_page.page
    page.goto(server.url + "/ui/#/jobs")
    page.wait_for_selector("table.jobs tbody")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))

    with server.api(alice) as api:
        job = submit(api, image=TEST_IMAGE, name="ticker", gpus=1, queue="vision", command=TICKER)
        page.wait_for_selector(f"tr[data-job='{job}']", timeout=UI_SHOWS_WITHIN_MS + 1_000)
        wait_state(api, job, {"RUNNING"})
        running_at = time.monotonic()
    page.wait_for_selector(
        f"tr[data-job='{job}'][data-state='RUNNING']", timeout=UI_SHOWS_WITHIN_MS
    )
    assert time.monotonic() - running_at < UI_SHOWS_WITHIN_MS / 1000 + 0.5
    assert navigations == [], "the page reloaded"
    assert "alice" in page.inner_text(f"tr[data-job='{job}']")

    page.goto(server.url + "/ui/#/cluster")
    page.wait_for_selector(f".gpu:has-text('alice · job {job}')")
    shoot(admin_page, shots, "cluster")
    page.goto(server.url + "/ui/#/jobs")
    page.wait_for_selector(f"tr[data-job='{job}']")
    shoot(admin_page, shots, "jobs")
    page.goto(server.url + "/ui/#/queues")
    page.wait_for_selector(".queue[data-queue='vision']:has-text('GPUs: 1 in use')")
    assert page.locator(".queue[data-queue='vision'] .mark.limit").count() == 1
    shoot(admin_page, shots, "queues")


def test_the_detail_page_follows_logs_and_shows_why_another_job_waits(
    admin_page: OfflinePage, server: ServerProcess, alice: str, shots: Path
) -> None:
    page = admin_page.page
    with server.api(alice) as api:
        running = submit(
            api, image=TEST_IMAGE, name="follow-me", gpus=1, queue="nlp", command=TICKER
        )
        wait_state(api, running, {"RUNNING"})
        # nlp may borrow only the 2 unguaranteed GPUs and holds 1: this one waits on quota
        blocked = submit(
            api, image=TEST_IMAGE, name="needs-two", gpus=2, queue="nlp", command=["true"]
        )

    page.goto(server.url + f"/ui/#/job/{running}")
    page.wait_for_selector("#logs:has-text('tick 1')")
    seen = int(re.findall(r"tick (\d+)", page.inner_text("#logs"))[-1])
    page.wait_for_selector(f"#logs:has-text('tick {seen + 3}')", timeout=5_000)  # live
    text = page.inner_text("main")
    assert "null" not in text.split() and "undefined" not in text
    for part in ("Spec", "Allocation", "State history", "Events", "follow-me", "RUNNING"):
        assert part in text
    shoot(admin_page, shots, "job-running")

    page.goto(server.url + f"/ui/#/job/{blocked}")
    reason = page.locator("#pending-reasons .reason").first
    reason.wait_for(timeout=10_000)
    with server.api(alice) as api:
        expected = job_state(api, blocked)["pending_reasons"]
    assert expected, "the scheduler gave no reason"
    shown = page.inner_text("#pending-reasons")
    for item in expected:
        assert item["layer"].upper() in shown and item["message"] in shown
        assert item["counterfactual"] is None or item["counterfactual"] in shown
    shoot(admin_page, shots, "job-pending")
    with server.api(alice) as api:
        api.post(f"/v1/jobs/{blocked}/cancel").raise_for_status()


def test_a_user_sees_only_their_own_jobs(
    browser: Browser, server: ServerProcess, alice: str, shots: Path
) -> None:
    bob = token(server, "bob")
    with server.api(bob) as api:
        own = submit(api, image=TEST_IMAGE, name="bobs", gpus=0, command=["true"])
        wait_state(api, own, {"SUCCEEDED", "FAILED"})
    page = OfflinePage(browser, server.url, viewport=DESKTOP)
    log_in(page, server.url, bob)
    page.page.goto(server.url + "/ui/#/jobs")
    page.page.select_option("select[aria-label=state]", "")
    page.page.wait_for_selector(f"tr[data-job='{own}']")
    users = page.page.locator("table.jobs tbody td:nth-child(3)").all_inner_texts()
    assert users and set(users) == {"bob"}
    shoot(page, shots, "jobs-as-user")
    page.page.goto(server.url + "/ui/#/cluster")
    page.page.wait_for_selector(".gpu:has-text('alice')")
    assert page.page.locator(".gpu a[href^='#/job/']").count() == 0, "another's job id shown"
    page.close()


def test_cookie_changes_need_the_ui_header_and_logout_forgets_the_cookie(
    browser: Browser, server: ServerProcess, alice: str
) -> None:
    page = OfflinePage(browser, server.url, viewport=DESKTOP)
    log_in(page, server.url, alice)
    with server.api(alice) as api:
        job = submit(api, image=TEST_IMAGE, gpus=1, command=["sleep", "60"])
    request = page.context.request
    refused = request.post(f"{server.url}/v1/jobs/{job}/cancel")
    assert refused.status == 403 and "cross-site" in refused.json()["error"]["message"]
    foreign = request.post(
        f"{server.url}/v1/jobs/{job}/cancel",
        headers={"X-Gpudock-UI": "1", "Origin": "http://evil.example"},
    )
    assert foreign.status == 403
    done = request.post(f"{server.url}/v1/jobs/{job}/cancel", headers={"X-Gpudock-UI": "1"})
    assert done.status == 200
    assert done.json()["state"] == "CANCELLED" or done.json()["cancel_requested"]

    page.page.click("#logout")
    page.page.wait_for_selector("#login:not([hidden])")
    assert httpx.get(server.url + "/ui/api/me", cookies=page_cookies(page)).status_code == 401
    page.close()


def page_cookies(page: OfflinePage) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies()}


def test_revoking_the_token_ends_the_dashboard_session_within_a_second_saying_why(
    browser: Browser, server: ServerProcess
) -> None:
    with server.api() as admin:
        created = admin.post("/v1/tokens", json={"user": "carol"}).json()
    page = OfflinePage(browser, server.url, viewport=DESKTOP)
    log_in(page, server.url, created["token"])
    page.page.wait_for_timeout(300)  # the session stream is open
    with server.api() as admin:
        admin.delete(f"/v1/tokens/{created['id']}").raise_for_status()
    page.page.wait_for_selector(
        "#login-error:has-text('Your session ended: token revoked.')", timeout=1000
    )
    assert page.page.is_visible("#login") and not page.page.is_visible("nav")
    wait_for(lambda: "gpudock_token" not in page_cookies(page), 5, "the dead cookie dropped")
    page.close()
