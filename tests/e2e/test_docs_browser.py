"""Swagger UI renders from the service alone: headless Chromium (Debian's), no request off loopback."""

from __future__ import annotations

import re
import shutil
from urllib.parse import urlparse

import pytest

from tests.conftest import skip_or_fail
from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        skip_or_fail("browser test skipped: Debian's chromium is not installed (apt-get install chromium)")
    assert path is not None
    return path


@pytest.mark.parametrize(("page", "ready_selector"), [("/docs", ".opblock"), ("/redoc", "[data-section-id]")])
def test_docs_render_offline_with_no_request_leaving_loopback(
    live_server: LiveServer, page: str, ready_selector: str
) -> None:
    from playwright.sync_api import sync_playwright

    requested: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context()
            context.on("request", lambda request: requested.append(request.url))
            tab = context.new_page()
            tab.goto(live_server.base_url + page, wait_until="networkidle")
            tab.wait_for_selector(ready_selector, timeout=20_000)
            rendered = tab.locator(ready_selector).count()
            text = tab.content()
        finally:
            browser.close()
    assert rendered > 0
    assert "healthz" in text
    local = {"127.0.0.1", "localhost"}
    off_loopback = [
        url
        for url in requested
        if urlparse(url.removeprefix("blob:")).hostname not in local and not url.startswith("data:")
    ]
    assert off_loopback == [], off_loopback


DEMO_KEY = re.compile(r"teff_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


def test_every_operation_executes_its_first_example_in_swagger_ui_on_the_demo_fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """What a newcomer does after `python3 dev.py demo`: open /docs, Authorize with the printed key,
    then Execute on every operation (the docs open in Try-it-out mode) with what Swagger UI fills in (the first example of
    the body and of each parameter). Every answer is 2xx."""
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    directory = tmp_path_factory.mktemp("demo-docs")
    database_url = f"sqlite:///{directory / 'teff.db'}"
    loaded = teff("demo", env=server_env(database_url, 8000), timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    match = DEMO_KEY.search(loaded.stdout)
    assert match is not None, loaded.stdout
    server = start_server(database_url, directory / "server.log")
    answers: dict[str, str] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_FLAGS)
            try:
                tab = browser.new_page()
                tab.goto(server.base_url + "/docs", wait_until="networkidle")
                tab.wait_for_selector(".opblock", timeout=20_000)
                tab.locator("button.authorize").first.click()
                dialog = tab.locator(".modal-ux")
                dialog.locator("input").first.fill(match.group(0))
                dialog.locator("button.authorize").first.click()
                dialog.locator("button.btn-done").first.click()
                blocks = tab.locator(".opblock")
                for index in range(blocks.count()):
                    block = blocks.nth(index)
                    label = " ".join(block.locator(".opblock-summary").first.inner_text().split()[:2])
                    block.locator(".opblock-summary").first.click()
                    # the docs open in "Try it out" mode (tryItOutEnabled): Execute is there
                    block.locator("button.execute").first.click()
                    status = block.locator(".live-responses-table tr.response .response-col_status").first
                    status.wait_for(timeout=20_000)
                    answers[label] = status.inner_text().strip()
                    block.locator(".opblock-summary").first.click()
            finally:
                browser.close()
    finally:
        stop_server(server)
    assert len(answers) >= 30, answers
    failed = {label: status for label, status in answers.items() if not status.startswith("2")}
    assert failed == {}, failed
