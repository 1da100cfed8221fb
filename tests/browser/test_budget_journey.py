"""The budgeting journey in real Chromium: leadership edits a grant and sees the shares move;
a program manager overreaches and is told why, in place."""

from pathlib import Path

import pytest

from budgets import demo
from budgets.balances import tree_stats
from budgets.models import BudgetNode
from budgets.templatetags.budget_format import pct

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "budgets.png"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _log_in(browser, live_server, username):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/login/?next=/budgets/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/budgets/")
    return page


def test_leader_changes_a_grant_and_the_manager_cannot_exceed_the_program(browser, live_server):
    demo.seed()
    olmo = BudgetNode.objects.get(slug_path="nlp/olmo")
    tulu = BudgetNode.objects.get(slug_path="nlp/tulu")
    stats = tree_stats()
    new_tulu = stats[tulu.pk].grant_gpu_hours + 50_000
    nlp_children = [s for s in stats.values() if s.node.path[:-4] == olmo.path[:-4]]
    siblings_after = sum(s.grant_gpu_hours for s in nlp_children) + 50_000
    expected = pct(stats[olmo.pk].grant_gpu_hours / siblings_after)

    page = _log_in(browser, live_server, "leader")
    olmo_share = page.locator(f"#node-{olmo.pk} td.share")
    before = olmo_share.inner_text()
    page.fill(f"#node-{tulu.pk} input[name=grant_gpu_hours]", str(new_tulu))
    page.click(f"#node-{tulu.pk} button[type=submit]")
    page.wait_for_function(
        "([sel, text]) => document.querySelector(sel).innerText.trim() === text",
        arg=[f"#node-{olmo.pk} td.share", expected],
    )
    assert before != expected
    assert tree_stats()[tulu.pk].grant_gpu_hours == new_tulu
    assert page.input_value(f"#node-{tulu.pk} input[name=grant_gpu_hours]") == f"{new_tulu:.0f}"
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    page.close()

    page = _log_in(browser, live_server, "manager")
    assert page.locator("[data-path=vision]").count() == 0
    page.fill(f"#node-{olmo.pk} input[name=grant_gpu_hours]", "9000000")
    page.click(f"#node-{olmo.pk} button[type=submit]")
    error = page.locator(f"#error-{olmo.pk}")
    error.wait_for()
    assert "Exceeds the grant of nlp" in error.inner_text()
    assert tree_stats()[olmo.pk].grant_gpu_hours < 9_000_000
    page.close()
