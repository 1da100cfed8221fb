"""The queue index and a cluster's queue: order, reasons, estimates, privacy, health, and a
query count that does not grow with the queue."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduling.models import Cluster
from scheduling.services import cancel_job
from tests.scheduling.test_pages_factories import cluster_fixture, make_cluster, make_job  # noqa: F401

pytestmark = pytest.mark.django_db
QUEUE_PAGE_QUERIES = 11


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
    queue = page[page.index("Waiting, in queue order") :]
    assert queue.index("job-alpha") < queue.index("job-beta") < queue.index("job-holder")
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


def _long_queue(researcher, manager, cluster, budget_tree, n, mine_at=None):
    """`n` waiting jobs at positions 1..n: the researcher's at `mine_at`, the rest the manager's."""
    jobs = {}
    for position in range(1, n + 1):
        owner = researcher if position == mine_at else manager
        jobs[position] = make_job(
            owner, cluster, budget_tree.olmo, queue_position=position, name=f"w{position}"
        )
    return jobs


def _waiting_positions(html):
    """Queue positions in the "Waiting, in queue order" table, top to bottom."""
    table = html[html.index("Waiting, in queue order") :]
    table = table[: table.index("</table>")]
    return [int(p) for p in re.findall(r'<td class="num position">(\d+)</td>', table)]


def _get(client, page=None, **headers):
    query = {} if page is None else {"page": page}
    return client.get(reverse("cluster-queue", args=["jupiter"]), query, headers=headers)


def test_the_first_page_shows_the_head_and_the_viewers_job_far_behind_it(
    client, researcher, manager, cluster, budget_tree
):
    jobs = _long_queue(researcher, manager, cluster, budget_tree, 120, mine_at=110)
    client.force_login(researcher)
    page = _get(client).content.decode()
    assert _waiting_positions(page) == list(range(1, 51))
    mine = jobs[110]
    assert f'id="job-{mine.pk}"' not in page
    own = re.search(rf'<tr id="mine-job-{mine.pk}" class="mine">\s*<td[^>]*>(\d+)</td>', page)
    assert own and own.group(1) == "110"
    assert "Your jobs in this queue" in page and "120 waiting for 960 GPUs" in page
    assert 'href="?page=3"' in page and 'hx-get="?page=2"' in page


def test_a_viewer_with_nothing_waiting_gets_no_section_of_their_own(
    client, researcher, manager, cluster, budget_tree
):
    _long_queue(researcher, manager, cluster, budget_tree, 3)
    client.force_login(researcher)
    page = _get(client).content.decode()
    assert "Your jobs in this queue" not in page and _waiting_positions(page) == [1, 2, 3]


def test_page_three_shows_the_tail_and_offers_no_more(
    client, researcher, manager, cluster, budget_tree
):
    _long_queue(researcher, manager, cluster, budget_tree, 120, mine_at=110)
    client.force_login(researcher)
    page = _get(client, 3).content.decode()
    assert _waiting_positions(page) == list(range(101, 121))
    assert 'id="queue-more"' not in page and "positions 101–120 of 120" in page


def test_a_page_past_the_end_gives_the_last_and_garbage_gives_the_first(
    client, researcher, manager, cluster, budget_tree
):
    _long_queue(researcher, manager, cluster, budget_tree, 120)
    client.force_login(researcher)
    past = _get(client, 99)
    assert past.status_code == 200 and _waiting_positions(past.content.decode())[0] == 101
    # Numbers out of range (0 and below too) give the last page, anything else the first.
    for asked, first in {"0": 101, "-1": 101, "abc": 1, "": 1, "2.5": 1}.items():
        response = _get(client, asked)
        assert response.status_code == 200
        assert _waiting_positions(response.content.decode())[0] == first


def test_load_more_appends_the_next_slice_as_a_fragment(
    client, researcher, manager, cluster, budget_tree
):
    _long_queue(researcher, manager, cluster, budget_tree, 120)
    client.force_login(researcher)
    fragment = _get(client, 2, **{"HX-Request": "true", "HX-Target": "queue-more"})
    html = fragment.content.decode()
    assert "<html" not in html and 'id="queue"' not in html and "<table" not in html
    positions = [int(p) for p in re.findall(r'<td class="num position">(\d+)</td>', html)]
    assert positions == list(range(51, 101))
    assert html.count('class=" appended"') == 50
    assert 'id="queue-more"' in html and 'hx-get="?page=3"' in html


def test_load_more_past_a_shrunken_queue_appends_nothing_again(
    client, researcher, manager, cluster, budget_tree
):
    # The page offered "load page 3" when 120 waited; 60 have since started or been cancelled.
    jobs = _long_queue(researcher, manager, cluster, budget_tree, 120)
    for job in list(jobs.values())[60:]:
        cancel_job(manager, job.pk)
    client.force_login(researcher)
    html = _get(client, 3, **{"HX-Request": "true", "HX-Target": "queue-more"}).content.decode()
    assert re.findall(r'<td class="num position">(\d+)</td>', html) == []
    assert "the queue has moved on" in html and 'id="queue-more"' not in html


def test_the_poll_keeps_the_page_it_shows(client, researcher, manager, cluster, budget_tree):
    _long_queue(researcher, manager, cluster, budget_tree, 120)
    client.force_login(researcher)
    html = _get(client, 2, **{"HX-Request": "true", "HX-Target": "queue"}).content.decode()
    assert "<html" not in html and 'id="queue"' in html and ' appended"' not in html
    assert _waiting_positions(html) == list(range(51, 101))
    assert f"{reverse('cluster-queue', args=['jupiter'])}?page=2" in html


@pytest.mark.parametrize("page", [None, 2])
def test_query_count_is_the_same_for_sixty_and_three_hundred_waiting(
    client, researcher, manager, cluster, budget_tree, page
):
    client.force_login(researcher)

    def count(n, first):
        for position in range(first, n + 1):
            owner = researcher if position % 7 == 0 else manager
            make_job(owner, cluster, budget_tree.olmo, queue_position=position)
        with CaptureQueriesContext(connection) as queries:
            response = _get(client, page)
        assert response.status_code == 200
        skipped = 50 * ((page or 1) - 1)
        assert len(_waiting_positions(response.content.decode())) == min(50, n - skipped)
        return len(queries)

    assert count(60, 1) == count(300, 61) == QUEUE_PAGE_QUERIES
