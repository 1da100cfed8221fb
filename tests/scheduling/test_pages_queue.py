"""The queue index and a cluster's queue: order, reasons, estimates, privacy, health, and a
query count that does not grow with the queue."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduling.models import Cluster
from tests.scheduling.test_pages_factories import cluster_fixture, make_cluster, make_job  # noqa: F401

pytestmark = pytest.mark.django_db
QUEUE_PAGE_QUERIES = 10


def test_queue_index_lists_clusters_with_busy_and_total_gpus(
    client, researcher, cluster, budget_tree
):
    make_job(researcher, cluster, budget_tree.olmo, state="running", gpus=8)
    make_job(researcher, cluster, budget_tree.olmo, gpus=8)
    make_cluster("saturn", nodes=1)
    client.force_login(researcher)
    page = client.get(reverse("queue-index")).content.decode()
    assert reverse("cluster-queue", args=["jupiter"]) in page
    assert reverse("cluster-queue", args=["saturn"]) in page
    assert "8 / 16" in page and "0 / 8" in page


def test_cluster_queue_lists_pending_jobs_in_queue_order_with_reason_and_estimate(
    client, researcher, manager, cluster, budget_tree
):
    make_job(
        researcher,
        cluster,
        budget_tree.olmo,
        name="job-beta",
        queue_position=2,
        pending_code="Priority",
        pending_message="Jobs of better-ranked projects go first.",
    )
    make_job(manager, cluster, budget_tree.olmo, name="job-alpha", queue_position=1)
    make_job(researcher, cluster, budget_tree.olmo, state="running", name="job-holder")
    client.force_login(researcher)
    page = client.get(reverse("cluster-queue", args=["jupiter"])).content.decode()
    assert page.index("job-alpha") < page.index("job-beta") < page.index("job-holder")
    assert "Priority" in page and "Jobs of better-ranked projects go first." in page
    assert "Resources" in page and "<td>manager</td>" in page


def test_jobs_the_viewer_may_not_see_keep_their_place_but_not_their_names(
    client, researcher, other_manager, cluster, budget_tree
):
    make_job(other_manager, cluster, budget_tree.segmentation, name="secret-vision", gpus=4)
    client.force_login(researcher)
    page = client.get(reverse("cluster-queue", args=["jupiter"])).content.decode()
    assert "secret-vision" not in page and "vision/segmentation" not in page
    assert "another team's job" in page and "Resources" in page


def test_cluster_queue_shows_the_backend_down_with_its_error(client, researcher, cluster):
    Cluster.objects.filter(pk=cluster.pk).update(reachable=False, last_error="sbatch: timeout")
    client.force_login(researcher)
    page = client.get(reverse("cluster-queue", args=["jupiter"])).content.decode()
    assert "backend is unreachable" in page and "sbatch: timeout" in page


def test_a_healthy_backend_shows_no_alarm(client, researcher, cluster):
    client.force_login(researcher)
    page = client.get(reverse("cluster-queue", args=["jupiter"])).content.decode()
    assert "unreachable" not in page


def test_queue_index_flags_an_unreachable_backend(client, researcher, cluster):
    Cluster.objects.filter(pk=cluster.pk).update(reachable=False, last_error="ssh: refused")
    client.force_login(researcher)
    page = client.get(reverse("queue-index")).content.decode()
    assert "unreachable" in page and "ssh: refused" in page


def test_unknown_cluster_is_404(client, researcher, cluster):
    client.force_login(researcher)
    assert client.get(reverse("cluster-queue", args=["saturn"])).status_code == 404


@pytest.mark.parametrize("persona", ["researcher", "leader", "cluster_admin", "outsider"])
def test_every_signed_in_persona_sees_the_queue(client, personas, cluster, persona):
    client.force_login(personas[persona])
    assert client.get(reverse("cluster-queue", args=["jupiter"])).status_code == 200
    assert client.get(reverse("queue-index")).status_code == 200


def test_htmx_poll_gets_the_queue_fragment(client, researcher, cluster, budget_tree):
    make_job(researcher, cluster, budget_tree.olmo, name="waiting")
    client.force_login(researcher)
    page = client.get(
        reverse("cluster-queue", args=["jupiter"]), headers={"HX-Request": "true"}
    ).content.decode()
    assert "<html" not in page and 'id="queue"' in page and "waiting" in page
    index = client.get(reverse("queue-index"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in index and 'id="clusters"' in index


def _queue_queries(client, researcher, cluster, budget_tree, n):
    for i in range(n):
        make_job(
            researcher,
            cluster,
            budget_tree.olmo if i % 2 else budget_tree.tulu,
            queue_position=i + 1,
            name=f"p{i}",
        )
        make_job(researcher, cluster, budget_tree.olmo, state="running", name=f"r{i}", gpus=1)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("cluster-queue", args=["jupiter"])).status_code == 200
    return len(queries)


def test_queue_page_query_count_is_pinned(
    client, researcher, cluster, budget_tree, django_assert_num_queries
):
    make_job(researcher, cluster, budget_tree.olmo)
    make_job(researcher, cluster, budget_tree.olmo, state="running")
    client.force_login(researcher)
    with django_assert_num_queries(QUEUE_PAGE_QUERIES):
        client.get(reverse("cluster-queue", args=["jupiter"]))


def test_queue_page_query_count_does_not_grow_with_the_queue(
    client, researcher, cluster, budget_tree
):
    client.force_login(researcher)
    few = _queue_queries(client, researcher, cluster, budget_tree, 3)
    many = _queue_queries(client, researcher, cluster, budget_tree, 27)
    assert few == many == QUEUE_PAGE_QUERIES
