"""Swagger UI renders from the service alone: headless Chromium (Debian's), no request off loopback."""

from __future__ import annotations

import shutil
from urllib.parse import urlparse

import pytest

from tests.conftest import skip_or_fail
from tests.e2e.conftest import LiveServer

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
