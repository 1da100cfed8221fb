"""The what-if journey in real Chromium: the leader turns on "Preview changes" on /budgets/,
triples tulu's grant without saving it, simulates (a progress bar polls until the replay is
done), sees tulu's delivered share rise beside the current one, and applies it: the grant
changes through the budget service, with its audit row."""

import datetime as dt
import threading
import time
from pathlib import Path

import pytest
import time_machine
from django.db import connection

from budgets import services
from budgets.balances import tree_stats
from budgets.models import AuditEntry, BudgetNode, Role
from scheduling.services import JobRequest, submit_job
from tests.budgets.factories import RoleFactory, UserFactory
from tests.scheduling.conftest import make_cluster
from whatif import enqueue
from whatif import services as whatif_services

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "whatif.png"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _organisation(tmp_path):
    """nlp holds 9,000 GPU-hours: olmo 3,000, tulu 1,000 (room to triple it). Six hours ago
    both queued thirty 2-hour 2-GPU jobs on a 16-GPU cluster."""
    leader = UserFactory(username="leader")
    root = services.create_root(None, "Org", "org")
    RoleFactory(user=leader, role=Role.Kind.LEADERSHIP, node=root)
    services.set_grant(None, root, 10_000)
    nlp = services.create_node(None, root, "Language", "nlp")
    services.set_grant(None, nlp, 9_000)
    people = {}
    for slug, grant in (("olmo", 3_000), ("tulu", 1_000)):
        node = services.create_node(None, nlp, slug.title(), slug)
        services.set_grant(None, node, grant)
        people[slug] = UserFactory(username=f"{slug}-person")
        RoleFactory(user=people[slug], role=Role.Kind.RESEARCHER, node=node)
    cluster = make_cluster(tmp_path, nodes=2, gpus=8)
    with time_machine.travel(dt.datetime.now(dt.UTC) - dt.timedelta(hours=6), tick=False) as clock:
        for i in range(30):
            for slug in ("olmo", "tulu"):
                clock.shift(1)
                request = JobRequest(
                    name=f"{slug}-{i}", project=f"nlp/{slug}", cluster=cluster.name, gpus=2,
                    min_runtime_s=600, sim_duration_s=7200,
                )  # fmt: skip
                submit_job(people[slug], request)


@pytest.fixture
def worker_thread(monkeypatch):
    """A worker that picks the task up a moment later, in its own thread and connection."""
    threads = []

    def later(preview_id):
        def run():
            time.sleep(1.5)
            try:
                whatif_services.run_preview(preview_id)
            finally:
                connection.close()

        threads.append(threading.Thread(target=run))
        threads[-1].start()

    monkeypatch.setattr(enqueue, "run_preview", later)
    yield
    for thread in threads:
        thread.join(timeout=60)


def test_leader_triples_a_grant_in_preview_sees_the_share_rise_and_applies_it(
    browser, live_server, tmp_path, worker_thread
):
    _organisation(tmp_path)
    tulu = BudgetNode.objects.get(slug_path="nlp/tulu")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{live_server.url}/login/?next=/budgets/")
    page.fill("input[name=username]", "leader")
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/budgets/")

    page.click("#preview-changes")
    grant = page.locator('input[name="grant:nlp/tulu"]')
    grant.wait_for()
    assert page.url.endswith("/budgets/preview/")
    grant.fill("3000")
    page.click("#whatif-simulate")
    page.locator("#whatif-progress").wait_for()  # the bar, polled by htmx
    page.locator('#whatif-status[data-status="done"]').wait_for(timeout=60_000)
    assert tree_stats()[tulu.pk].grant_gpu_hours == 1_000  # a preview saves nothing

    row = page.locator('tr[data-path="nlp/tulu"]')
    current = float(row.locator(".delivered-current").inner_text().split()[0])
    proposed = float(row.locator(".delivered-proposed").inner_text().split()[0])
    assert proposed > current
    assert page.locator("svg.whatif-chart").count() == 1
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    page.click("#whatif-apply")
    page.wait_for_url(f"{live_server.url}/budgets/")
    assert "Applied the proposed grants: nlp/tulu" in page.inner_text(".messages")
    assert tree_stats()[tulu.pk].grant_gpu_hours == 3_000
    audit = AuditEntry.objects.get(node=tulu, reason__startswith="applied from what-if")
    assert (audit.old, audit.new) == ("1000.00", "3000.00")
    page.close()
