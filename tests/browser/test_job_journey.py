"""The researcher's journey in real Chromium: submit a job, see it wait with a reason and a
queue position, see it run once the job blocking the cluster finishes, and ask why it is
consuming GPU-hours. Scheduling passes and backend syncs are driven from the test, as beat
would drive them; dispatch runs eagerly against the simulated cluster."""

import time
from pathlib import Path

import pytest

from budgets.models import GpuType
from scheduling.models import Cluster, Job, Node
from scheduling.passes import run_pass
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SPEED = 120  # simulated seconds per real second: the blocker's 10 minutes last 5 s

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def eager(settings, eager_celery):
    """Dispatch tasks run in-process, right after the pass commits."""
    settings.CELERY_TASK_ALWAYS_EAGER = True


@pytest.fixture
def jupiter(tmp_path):
    GpuType.objects.get_or_create(name="H100")
    cluster = Cluster.objects.create(
        name="jupiter",
        gpu_type="H100",
        options={
            "nodes": "2",
            "gpus_per_node": "8",
            "speed": str(SPEED),
            "state_dir": str(tmp_path / "sim"),
        },
    )
    for index in range(2):
        Node.objects.create(cluster=cluster, name=f"jupiter-{index:02d}", gpus=8, gpu_type="H100")
    return cluster


def _submit(user, name, gpus, project="nlp/olmo", sim_s=600):
    return submit_job(
        user,
        JobRequest(
            name=name,
            project=project,
            cluster="jupiter",
            gpus=gpus,
            min_runtime_s=600,
            sim_duration_s=sim_s,
        ),
    )


def _wait_until_finished(cluster, job, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sync_cluster(cluster.pk)
        job.refresh_from_db()
        if job.is_terminal:
            return
        time.sleep(0.5)
    raise AssertionError(f"job #{job.pk} still {job.state} after {timeout} s")


def test_researcher_submits_waits_with_a_reason_runs_and_asks_why(
    browser, live_server, eager, jupiter, researcher, project_lead, manager
):
    blocker = _submit(project_lead, "olmo-pretrain", 16)
    run_pass(jupiter.pk)
    blocker.refresh_from_db()
    assert blocker.state == "running" and blocker.dispatched

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/login/?next=/jobs/")
    page.fill("input[name=username]", "researcher")
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs/")

    page.fill("input[name=name]", "ablation-7b")
    page.select_option("select[name=project]", "nlp/olmo")
    page.select_option("select[name=cluster]", "jupiter")
    page.fill("input[name=gpus]", "8")
    page.fill("input[name=min_runtime_hours]", "1")
    page.fill("input[name=sim_duration_hours]", "10")
    page.click("#submit button[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs/*/")
    job = Job.objects.get(name="ablation-7b")
    assert page.url.endswith(f"/jobs/{job.pk}/")
    page.locator("#job-status .reason-code", has_text="New").wait_for()

    _submit(manager, "tulu-sweep", 8, project="", sim_s=3600)  # unfunded: waits behind
    run_pass(jupiter.pk)
    # The job page polls every 5 s: the reason and position arrive without a reload.
    page.locator("#job-status .position", has_text="#1 in queue").wait_for(timeout=15_000)
    reason = page.locator("#job-status .reason-code").inner_text()
    assert reason == "Resources"
    # Honest: nodes are held for it, and the blocker need not yield to it, so no time is guessed.
    assert "no start time" in page.locator("#job-status").inner_text()

    page.goto(f"{live_server.url}/queue/jupiter/")
    pending_row = page.locator(f"#queue table.pending #job-{job.pk}")
    assert "Resources" in pending_row.inner_text()
    assert pending_row.locator("td").first.inner_text() == "1"
    assert "olmo-pretrain" in page.locator("#queue table.running").inner_text()
    page.screenshot(path=str(SCREENSHOTS / "queue.png"), full_page=True)

    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    _wait_until_finished(jupiter, blocker)
    run_pass(jupiter.pk)
    job.refresh_from_db()
    assert job.state == "running" and job.funded
    sync_cluster(jupiter.pk)  # the backend reports the job's GPU utilisation
    page.locator("#job-status .badge.state-running").wait_for(timeout=15_000)
    assert "funded, charged to the project" in page.locator("#job-status").inner_text()

    page.click("text=Why is this consuming GPU-hours?")
    page.wait_for_url(f"{live_server.url}/jobs/{job.pk}/why/")
    why = page.locator("#why").inner_text()
    assert "nlp\n" in why and "nlp/olmo" in why
    assert "8.00 GPU-hours charged per hour" in why
    assert "protected until" in why and "runtime contract" in why
    assert "What would preempt it" in why
    assert page.locator("#standing tbody tr").count() == 2
    page.screenshot(path=str(SCREENSHOTS / "explain.png"), full_page=True)
    page.close()
