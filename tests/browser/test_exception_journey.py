"""The exception journey in real Chromium: a researcher asks for 12 h of protection on a
running job, a cluster admin approves it in place in the inbox, and the job page shows the
new protected-until and cites the exception."""

import datetime as dt

import pytest
from django.utils import dateformat, timezone

from exceptions.models import ExceptionRequest
from scheduling.models import Cluster, Node
from tests.budgets.factories import GpuTypeFactory
from tests.exceptions.conftest import running_job as start_running

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def running_job(researcher, budget_tree):
    """A funded job an hour into its run, as a pass starts one: its GPU type priced and the lien
    for its protected window held."""
    GpuTypeFactory(name="H100", cost_factor="1.000")
    cluster = Cluster.objects.create(name="jupiter", gpu_type="H100")
    Node.objects.create(cluster=cluster, name="jupiter-00", gpus=8, gpu_type="H100")
    return start_running(researcher, budget_tree.olmo, cluster)


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
