"""The exception journey in real Chromium: a researcher asks for 12 h of protection on a
running job, a cluster admin approves it in place in the inbox, and the job page shows the
new protected-until and cites the exception."""

import datetime as dt

import pytest
from django.utils import dateformat, timezone

from exceptions.models import ExceptionRequest
from scheduling.models import Cluster, Job, Node

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def running_job(researcher, budget_tree):
    cluster = Cluster.objects.create(name="jupiter", gpu_type="H100")
    Node.objects.create(cluster=cluster, name="jupiter-00", gpus=8, gpu_type="H100")
    started = timezone.now() - dt.timedelta(hours=1)
    return Job.objects.create(
        name="camera-ready",
        owner=researcher,
        project=budget_tree.olmo,
        cluster=cluster,
        gpus=8,
        min_runtime_s=8 * 3600,
        state=Job.State.RUNNING,
        funded=True,
        submitted_at=started - dt.timedelta(minutes=2),
        started_at=started,
        protected_until=started + dt.timedelta(hours=8),
        nodes=[["jupiter-00", 8]],
    )


def log_in(browser, live_server, username):
    page = browser.new_context().new_page()
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_load_state()
    return page


def test_researcher_asks_admin_approves_job_page_shows_the_new_protection(
    browser, live_server, researcher, cluster_admin, running_job
):
    asker = log_in(browser, live_server, "researcher")
    asker.goto(f"{live_server.url}/exceptions/new/protection/{running_job.pk}/")
    asker.fill("input[name=hours]", "12")
    asker.fill("textarea[name=justification]", "Camera-ready deadline: the run must not be cut.")
    asker.click("text=Send the request")
    asker.wait_for_selector("#exception-state")
    assert asker.inner_text("#exception-state") == "Submitted"
    request = ExceptionRequest.objects.get()

    admin = log_in(browser, live_server, "cluster_admin")
    admin.goto(f"{live_server.url}/exceptions/")
    row = admin.locator(f"#exception-{request.pk}")
    assert "job #" in row.inner_text() and "12 h" in row.inner_text()
    row.locator("button[value=approve]").click()
    admin.wait_for_selector(f"#exception-{request.pk} .decision")
    assert "Active" in admin.inner_text(f"#exception-{request.pk} .decision")

    running_job.refresh_from_db()
    expected = running_job.started_at + dt.timedelta(hours=12)
    assert running_job.protected_until == expected
    asker.goto(f"{live_server.url}/jobs/{running_job.pk}/")
    text = asker.inner_text("#job-status")
    shown = dateformat.format(timezone.localtime(expected), "M j, H:i")
    assert f"protected until {shown}" in text
    assert f"exception #{request.pk}" in text
