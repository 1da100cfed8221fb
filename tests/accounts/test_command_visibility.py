"""A job's command is shown to its owner, its project's leads and cluster admins only: on the
job page, in the API and in the explanation."""

import pytest

from tests.budgets.factories import RoleFactory, UserFactory

SECRET = "--secret-path"
ALLOWED = ["researcher", "project_lead", "cluster_admin"]
REFUSED = ["leader", "manager", "colleague"]


@pytest.fixture
def people(personas, budget_tree):
    colleague = UserFactory(username="colleague")
    RoleFactory(user=colleague, role="researcher", node=budget_tree.olmo)
    return {**personas, "colleague": colleague}


@pytest.mark.parametrize("who", ALLOWED + REFUSED)
def test_the_api_shows_the_command_only_to_those_who_may_see_it(
    client, people, researchers_job, who
):
    client.force_login(people[who])
    detail = client.get(f"/api/v1/jobs/{researchers_job.pk}/").json()
    listed = client.get("/api/v1/jobs/").json()["results"]
    why = client.get(f"/api/v1/jobs/{researchers_job.pk}/explain/").json()
    [row] = [job for job in listed if job["id"] == researchers_job.pk]
    if who in ALLOWED:
        assert detail["command"] == researchers_job.command
        assert row["command"] == researchers_job.command
        assert why["command"] == researchers_job.command
    else:
        assert detail["command"] is None
        assert row["command"] is None
        assert why["command"] is None


@pytest.mark.parametrize("who", ALLOWED + REFUSED)
def test_the_job_pages_show_the_command_only_to_those_who_may_see_it(
    client, people, researchers_job, who
):
    client.force_login(people[who])
    for url in (f"/jobs/{researchers_job.pk}/", f"/jobs/{researchers_job.pk}/why/"):
        page = client.get(url)
        assert page.status_code == 200
        assert (SECRET.encode() in page.content) == (who in ALLOWED), url


@pytest.mark.parametrize("who", ALLOWED + REFUSED)
def test_the_job_page_shows_declared_variables_only_to_those_who_may_see_the_command(
    client, people, researchers_job, who
):
    # What a submission declaring these variables stores (tests/scheduling/test_submission.py).
    type(researchers_job).objects.filter(pk=researchers_job.pk).update(
        env={"WANDB_API_KEY": "k-123", "EPOCHS": "3"}
    )
    client.force_login(people[who])
    page = client.get(f"/jobs/{researchers_job.pk}/").content
    assert (b"WANDB_API_KEY=k-123" in page) == (who in ALLOWED)
    assert (b"EPOCHS=3" in page) == (who in ALLOWED)
    api = client.get(f"/api/v1/jobs/{researchers_job.pk}/").json()
    assert api["env"] == ({"WANDB_API_KEY": "k-123", "EPOCHS": "3"} if who in ALLOWED else None)
