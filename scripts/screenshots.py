"""Capture the README's screenshots from a running demo (`make demo`, then run this).

    .venv/bin/python scripts/screenshots.py [--url http://127.0.0.1:8000] [--out docs/screenshots]

Uses Debian's Chromium through Playwright (no browser download).
"""

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

PAGES = [
    # (user, path, file)
    ("researcher", "/jobs/", "jobs.png"),
    ("leader", "/running/", "running.png"),
    ("admin", "/operations/", "operations.png"),
]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", default="docs/screenshots")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=ARGS)
        for user, path, name in PAGES:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{args.url}/login/")
            page.fill("input[name=username]", user)
            page.fill("input[name=password]", "demo")
            page.click("button[type=submit]")
            page.wait_for_load_state()
            page.goto(f"{args.url}{path}")
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(out / name), full_page=False)
            context.close()
            print(out / name)
        browser.close()


if __name__ == "__main__":
    main()
