"""The Django admin for clusters, nodes and jobs: read-mostly, changes through services."""

import pytest
from django.urls import reverse

from scheduling.models import Job, Node
from tests.scheduling.test_pages_factories import cluster_fixture, make_job  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(researcher, cluster, budget_tree):
    return make_job(researcher, cluster, budget_tree.olmo, name="admin-viewed")


def test_job_admin_lists_and_shows_jobs_with_their_timeline(admin_client, job):
    listing = admin_client.get(reverse("admin:scheduling_job_changelist")).content.decode()
    assert "admin-viewed" in listing
    page = admin_client.get(reverse("admin:scheduling_job_change", args=[job.pk])).content.decode()
    assert "submitted" in page  # the JobEvent inline
    assert 'name="state"' not in page and 'name="funded"' not in page
    assert 'name="queue_position"' not in page and 'name="gpus"' not in page


def test_posting_a_state_through_the_admin_changes_only_the_name(admin_client, job):
    event = job.events.get()
    response = admin_client.post(
        reverse("admin:scheduling_job_change", args=[job.pk]),
        {
            "name": "renamed",
            "state": "completed",
            "funded": "on",
            "gpus": "64",
            "events-TOTAL_FORMS": "1",
            "events-INITIAL_FORMS": "1",
            "events-0-id": str(event.pk),
            "events-0-job": str(job.pk),
        },
    )
    job.refresh_from_db()
    assert response.status_code == 302  # saved
    assert job.name == "renamed"
    assert (job.state, job.funded, job.gpus) == ("pending", False, 8)


def test_jobs_cannot_be_added_in_the_admin(admin_client):
    assert admin_client.get(reverse("admin:scheduling_job_add")).status_code == 403


def test_the_admin_cancels_jobs_through_the_service(admin_client, job):
    admin_client.post(
        reverse("admin:scheduling_job_changelist"),
        {"action": "cancel_jobs", "_selected_action": [job.pk]},
    )
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert job.events.filter(kind="cancelled").exists()


def test_the_admin_drains_and_undrains_nodes_through_the_service(admin_client, cluster):
    node = cluster.nodes.first()
    url = reverse("admin:scheduling_node_changelist")
    admin_client.post(url, {"action": "drain_nodes", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert node.drained and node.drain_reason == "drained from the admin"
    assert node.drain_requested_by.username == "admin"
    admin_client.post(url, {"action": "undrain_nodes", "_selected_action": [node.pk]})
    assert not Node.objects.get(pk=node.pk).drained


def test_node_drain_fields_are_read_only_in_the_admin(admin_client, cluster):
    node = cluster.nodes.first()
    url = reverse("admin:scheduling_node_change", args=[node.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="drained"' not in page and 'name="drained_by"' not in page


def test_cluster_admin_page_shows_health_read_only_and_its_nodes(admin_client, cluster):
    page = admin_client.get(
        reverse("admin:scheduling_cluster_change", args=[cluster.pk])
    ).content.decode()
    assert "jupiter-00" in page and "jupiter-01" in page
    assert 'name="reachable"' not in page and 'name="pass_lock_token"' not in page
