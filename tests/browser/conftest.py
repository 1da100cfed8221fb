"""Real Chromium through Playwright for the user journeys (no browser download: Debian's
/usr/bin/chromium, or ALLOT_CHROMIUM)."""

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    # The machine's network is closed: without these, Chromium keeps dialling out at start.
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(autouse=True)
def allow_sync_orm_under_playwright(monkeypatch):
    """Playwright's sync API runs an event loop in this thread, which makes Django refuse ORM
    calls from the test body; the live server runs in its own thread, so this is safe here.
    Set per test (not at import) so no other test or subprocess inherits it."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
