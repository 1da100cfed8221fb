"""My jobs, the submit form, the job page and cancellation."""

import pytest
from django.urls import reverse

from scheduling.models import Job
from tests.scheduling.test_pages_factories import cluster_fixture, make_job  # noqa: F401

pytestmark = pytest.mark.django_db


def submit(client, headers=None, **overrides):
    data = {
        "name": "train",
        "project": "nlp/olmo",
        "cluster": "jupiter",
        "gpus": 8,
        "min_runtime_hours": "2",
        "resumable": "on",
        "kind": "batch",
        "command": "python x",
        "sim_duration_hours": "0.5",
    }
    data.update(overrides)
    return client.post(reverse("job-list"), data, headers=headers or {})


def test_my_jobs_lists_only_my_jobs_with_where_they_stand(
    client, researcher, manager, cluster, budget_tree
):
    mine = make_job(researcher, cluster, budget_tree.olmo, name="mine-pending")
    running = make_job(researcher, cluster, budget_tree.olmo, state="running", name="mine-running")
    make_job(manager, cluster, budget_tree.olmo, name="someone-else")
    client.force_login(researcher)
    page = client.get(reverse("job-list")).content.decode()
    assert "mine-pending" in page and "mine-running" in page
    assert "someone-else" not in page
    assert "#1 in queue" in page and "Resources" in page and "Waiting for GPUs" in page
    assert "estimated start" in page
    assert "protected until" in page
    assert f'id="job-{mine.pk}"' in page and f'id="job-{running.pk}"' in page


def test_submit_form_offers_only_the_users_projects(client, researcher, cluster):
    client.force_login(researcher)
    page = client.get(reverse("job-list")).content.decode()
    assert 'value="nlp/olmo"' in page
    assert 'value="vision/segmentation"' not in page
    assert 'value="jupiter"' in page


def test_submitting_creates_a_pending_job_and_redirects_to_it(client, researcher, cluster):
    client.force_login(researcher)
    response = submit(client)
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("job-detail", args=[job.pk])
    assert (job.state, job.gpus) == ("pending", 8)
    assert (job.min_runtime_s, job.sim_duration_s) == (7200, 1800)
    assert job.project.slug_path == "nlp/olmo" and job.resumable and job.owner == researcher


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"min_runtime_hours": "100"}, "min_runtime_hours", "extended_protection exception"),
        ({"gpus": "40"}, "gpus", "more than cluster jupiter has"),
        ({"gpus": "12"}, "gpus", "multiple of 8"),
        ({"project": "vision/segmentation"}, "project", "valid choice"),
        ({"name": "  "}, "name", "required"),
        ({"kind": "interactive", "min_runtime_hours": "4"}, "min_runtime_hours", "interactive"),
        ({"cluster": "saturn"}, "cluster", "valid choice"),
    ],
)
def test_bad_submissions_are_refused_on_the_field_and_create_nothing(
    client, researcher, cluster, overrides, field, words
):
    client.force_login(researcher)
    response = submit(client, **overrides)
    page = response.content.decode()
    assert response.status_code == 400
    assert f'id="error-{field}"' in page
    assert words in page
    assert not Job.objects.exists()


def test_htmx_submission_refusal_returns_only_the_form_fragment(client, researcher, cluster):
    client.force_login(researcher)
    response = client.post(
        reverse("job-list"),
        {
            "name": "x",
            "project": "nlp/olmo",
            "cluster": "jupiter",
            "gpus": "40",
            "min_runtime_hours": "1",
            "kind": "batch",
        },
        HTTP_HX_REQUEST="true",
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in page and 'id="submit"' in page and 'id="error-gpus"' in page
    assert not Job.objects.exists()


def test_htmx_submission_success_redirects_the_browser_to_the_job(client, researcher, cluster):
    client.force_login(researcher)
    response = submit(client, headers={"HX-Request": "true"})
    assert response["HX-Redirect"] == reverse("job-detail", args=[Job.objects.get().pk])


def test_job_list_poll_returns_the_table_fragment_and_stops_when_nothing_is_active(
    client, researcher, cluster, budget_tree
):
    job = make_job(researcher, cluster, budget_tree.olmo)
    client.force_login(researcher)
    live = client.get(reverse("job-list"), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in live and 'id="my-jobs"' in live and 'hx-trigger="every 5s"' in live
    Job.objects.filter(pk=job.pk).update(state="completed")
    done = client.get(reverse("job-list"), HTTP_HX_REQUEST="true").content.decode()
    assert 'id="my-jobs"' in done and "hx-trigger" not in done


def test_job_page_shows_state_funding_nodes_and_timeline(client, researcher, cluster, budget_tree):
    job = make_job(researcher, cluster, budget_tree.olmo, state="running", name="trainer")
    client.force_login(researcher)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "running" in page and "funded, charged to the project" in page
    assert "jupiter-00 (8 GPUs)" in page
    assert "submitted" in page  # the timeline
    assert reverse("job-explain", args=[job.pk]) in page
    assert reverse("job-cancel", args=[job.pk]) in page


@pytest.mark.parametrize(
    ("persona", "status"),
    [
        ("researcher", 200),
        ("project_lead", 200),
        ("manager", 200),
        ("leader", 200),
        ("cluster_admin", 200),
        ("other_manager", 404),
        ("outsider", 404),
    ],
)
def test_job_page_is_seen_by_those_who_see_its_project_only(
    client, personas, cluster, budget_tree, persona, status
):
    job = make_job(personas["researcher"], cluster, budget_tree.olmo)
    client.force_login(personas[persona])
    assert client.get(reverse("job-detail", args=[job.pk])).status_code == status


def test_job_page_offers_cancel_only_to_owner_and_admins(
    client, researcher, manager, cluster, budget_tree
):
    job = make_job(researcher, cluster, budget_tree.olmo)
    client.force_login(manager)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert reverse("job-cancel", args=[job.pk]) not in page


def test_owner_cancels_a_pending_job(client, researcher, cluster, budget_tree):
    job = make_job(researcher, cluster, budget_tree.olmo)
    client.force_login(researcher)
    response = client.post(reverse("job-cancel", args=[job.pk]))
    job.refresh_from_db()
    assert response.status_code == 302 and job.state == "cancelled"
    assert job.events.filter(kind="cancelled").exists()


def test_cluster_admin_cancels_anyones_job(client, researcher, cluster_admin, cluster, budget_tree):
    job = make_job(researcher, cluster, budget_tree.olmo)
    client.force_login(cluster_admin)
    client.post(reverse("job-cancel", args=[job.pk]))
    job.refresh_from_db()
    assert job.state == "cancelled"


@pytest.mark.parametrize(("persona", "status"), [("manager", 403), ("outsider", 404)])
def test_others_cannot_cancel(client, personas, cluster, budget_tree, persona, status):
    job = make_job(personas["researcher"], cluster, budget_tree.olmo)
    client.force_login(personas[persona])
    assert client.post(reverse("job-cancel", args=[job.pk])).status_code == status
    job.refresh_from_db()
    assert job.state == "pending"


def test_cancelling_a_finished_job_says_why(client, researcher, cluster, budget_tree):
    job = make_job(researcher, cluster, budget_tree.olmo, state="completed")
    client.force_login(researcher)
    page = client.post(reverse("job-cancel", args=[job.pk]), follow=True).content.decode()
    assert "already completed" in page


def test_cancel_is_post_only(client, researcher, cluster, budget_tree):
    job = make_job(researcher, cluster, budget_tree.olmo)
    client.force_login(researcher)
    assert client.get(reverse("job-cancel", args=[job.pk])).status_code == 405


def test_job_page_polls_while_active_and_stops_when_it_ends(
    client, researcher, cluster, budget_tree
):
    job = make_job(researcher, cluster, budget_tree.olmo, state="running")
    client.force_login(researcher)
    url = reverse("job-detail", args=[job.pk])
    live = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in live and 'hx-trigger="every 5s"' in live
    Job.objects.filter(pk=job.pk).update(state="completed")
    assert "hx-trigger" not in client.get(url, HTTP_HX_REQUEST="true").content.decode()


def test_pages_require_login(client, cluster):
    for name in ("job-list", "queue-index", "running-overview", "operations"):
        response = client.get(reverse(name))
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_home_panel_lists_my_active_jobs(client, researcher, cluster, budget_tree):
    make_job(researcher, cluster, budget_tree.olmo, name="active-one")
    make_job(researcher, cluster, budget_tree.olmo, state="completed", name="finished-one")
    client.force_login(researcher)
    page = client.get(reverse("home")).content.decode()
    assert "My active jobs" in page and "active-one" in page and "finished-one" not in page


def test_the_owner_of_a_live_job_can_request_longer_protection_from_its_page(
    client, researcher, cluster_admin, tmp_path
):
    from django.urls import reverse

    from tests.scheduling.conftest import make_cluster

    make_cluster(tmp_path, name="jupiter")
    from scheduling.services import JobRequest, submit_job

    job = submit_job(
        researcher,
        JobRequest(name="j", project="nlp/olmo", cluster="jupiter", gpus=1, min_runtime_s=3600),
    )
    link = reverse("exception-new-protection", args=[job.pk])
    client.force_login(researcher)
    assert link in client.get(reverse("job-detail", args=[job.pk])).content.decode()
    client.force_login(cluster_admin)
    assert link not in client.get(reverse("job-detail", args=[job.pk])).content.decode()
