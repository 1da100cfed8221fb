"""The running overview (leadership) and the operations page (cluster admins)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduling import reports
from scheduling.models import Cluster, JobEvent, Node
from tests.budgets.factories import UsageEntryFactory
from tests.scheduling.test_pages_factories import cluster_fixture, make_job  # noqa: F401

pytestmark = pytest.mark.django_db
RUNNING_PAGE_QUERIES = 8
OPERATIONS_PAGE_QUERIES = 10  # the most-preempted jobs: one more


@pytest.fixture
def busy(personas, cluster, budget_tree):
    researcher, other = personas["researcher"], personas["other_manager"]
    return {
        "olmo": make_job(
            researcher, cluster, budget_tree.olmo, state="running", gpus=8, name="olmo-train"
        ),
        "idle": make_job(
            researcher,
            cluster,
            budget_tree.olmo,
            state="running",
            gpus=2,
            name="olmo-notebook",
            gpu_utilization=0.01,
            low_utilization_since=timezone.now() - timedelta(hours=3),
        ),
        "vision": make_job(
            other, cluster, budget_tree.segmentation, state="running", gpus=4, name="seg-train"
        ),
        "free": make_job(researcher, cluster, None, state="running", gpus=1, name="scavenge"),
        "waiting": make_job(researcher, cluster, budget_tree.olmo, name="olmo-waiting"),
    }


def test_leadership_sees_everything_running_grouped_by_program_and_project(client, leader, busy):
    client.force_login(leader)
    page = client.get(reverse("running-overview")).content.decode()
    assert "<strong>14</strong> funded GPUs" in page and "<strong>1</strong> unfunded GPUs" in page
    assert page.index("<h2>nlp") < page.index("<code>nlp/olmo</code>")
    assert "<h2>vision" in page and "<code>vision/segmentation</code>" in page
    assert "No project (unfunded work)" in page
    assert "olmo-train" in page and "seg-train" in page and "scavenge" in page
    assert "olmo-waiting" not in page


def test_idle_jobs_are_flagged_in_the_overview(client, leader, busy):
    client.force_login(leader)
    page = client.get(reverse("running-overview")).content.decode()
    assert '<strong class="error">1</strong> idle job' in page
    assert page.count(">idle ") == 1 and "olmo-notebook" in page


def test_group_share_is_set_against_its_usage(client, leader, busy, budget_tree):
    UsageEntryFactory(node=budget_tree.olmo, gpu_seconds=3 * 3600, cost_gpu_seconds=3 * 3600)
    UsageEntryFactory(node=budget_tree.segmentation, gpu_seconds=3600, cost_gpu_seconds=3600)
    client.force_login(leader)
    page = client.get(reverse("running-overview")).content.decode()
    assert "share 67 % · usage 75 %" in page  # nlp: two thirds of the budget, 3 of 4 hours
    assert "share 33 % · usage 25 %" in page  # vision


def test_a_researcher_sees_only_the_running_jobs_they_may_see(client, researcher, busy):
    client.force_login(researcher)
    page = client.get(reverse("running-overview")).content.decode()
    assert "olmo-train" in page and "scavenge" in page
    assert "seg-train" not in page and "vision" not in page


def test_an_unfunded_running_job_is_shown_as_preemptible_not_protected(client, researcher, busy):
    client.force_login(researcher)
    page = client.get(reverse("job-list")).content.decode()
    row = page[page.index(f'id="job-{busy["free"].pk}"') :]
    row = row[: row.index("</tr>")]
    assert "unfunded: preemptible at any time" in row and "protected until" not in row


def test_an_outsider_sees_nothing_running(client, outsider, busy):
    client.force_login(outsider)
    page = client.get(reverse("running-overview")).content.decode()
    assert "Nothing you can see is running." in page


def test_running_overview_htmx_poll_gets_the_fragment(client, leader, busy):
    client.force_login(leader)
    page = client.get(reverse("running-overview"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in page and 'id="overview"' in page


def test_running_overview_query_count_does_not_grow_with_jobs(client, leader, cluster, budget_tree):
    client.force_login(leader)
    counts = []
    for n in (3, 27):
        for i in range(n):
            make_job(leader, cluster, budget_tree.tulu, state="running", gpus=1, name=f"r{i}")
        with CaptureQueriesContext(connection) as queries:
            client.get(reverse("running-overview"))
        counts.append(len(queries))
    assert counts == [RUNNING_PAGE_QUERIES, RUNNING_PAGE_QUERIES]


# -- operations ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("persona", "status"),
    [
        ("cluster_admin", 200),
        ("leader", 200),
        ("manager", 403),
        ("researcher", 403),
        ("outsider", 403),
    ],
)
def test_operations_is_for_cluster_admins_and_leadership(
    client, personas, cluster, persona, status
):
    client.force_login(personas[persona])
    assert client.get(reverse("operations")).status_code == status


def test_operations_shows_utilisation_occupancy_preemptions_and_last_pass(
    client, cluster_admin, cluster, busy
):
    now = timezone.now()
    JobEvent.objects.create(job=busy["waiting"], at=now - timedelta(hours=2), kind="preempted")
    JobEvent.objects.create(job=busy["waiting"], at=now - timedelta(hours=30), kind="preempted")
    Cluster.objects.filter(pk=cluster.pk).update(last_pass_at=now, last_pass_ms=42.4)
    client.force_login(cluster_admin)
    page = client.get(reverse("operations")).content.decode()
    row = page[page.index(f'id="ops-cluster-{cluster.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "15 / 16" in row and "94 %" in row
    assert '<td class="num">14</td><td class="num">1</td>' in row  # funded, unfunded GPUs
    assert '<td class="num">1</td>\n      <td>42 ms' in row  # one preemption in 24 h


def test_wait_time_percentiles_by_job_size(cluster, researcher, budget_tree):
    now = timezone.now()
    for gpus, wait_min in [(1, 1), (1, 3), (1, 10), (8, 60), (16, 120)]:
        make_job(
            researcher,
            cluster,
            budget_tree.olmo,
            state="completed",
            gpus=gpus,
            submitted_at=now - timedelta(hours=5),
            first_started_at=now - timedelta(hours=5) + timedelta(minutes=wait_min),
            started_at=now - timedelta(hours=1),
        )  # a later restart is not waiting
    make_job(
        researcher,
        cluster,
        budget_tree.olmo,
        state="completed",
        gpus=1,
        submitted_at=now - timedelta(days=9),
        first_started_at=now - timedelta(days=8),
    )
    waits = {w["label"]: w for w in reports.wait_percentiles(now)}
    assert (waits["1 GPU"]["count"], waits["1 GPU"]["p50_s"], waits["1 GPU"]["p95_s"]) == (
        3,
        180,
        600,
    )
    assert waits["2–8 GPUs"]["p50_s"] == 3600 and waits["9–64 GPUs"]["p95_s"] == 7200
    assert waits["> 64 GPUs"]["count"] == 0 and waits["> 64 GPUs"]["p50_s"] is None


def test_drains_in_progress_show_their_drained_by_time(client, cluster_admin, cluster, busy):
    node = cluster.nodes.get(name="jupiter-00")
    Node.objects.filter(pk=node.pk).update(
        drained=True,
        drain_reason="fan",
        drain_requested_by=cluster_admin,
        drained_by=timezone.now() + timedelta(hours=1),
    )
    client.force_login(cluster_admin)
    page = client.get(
        reverse("operations") + "?part=nodes", headers={"HX-Request": "true"}
    ).content.decode()
    assert "<html" not in page and "1 draining" in page and "empty by" in page
    assert "fan — by cluster_admin" in page


def test_an_empty_drained_node_is_ready_for_repair(client, cluster_admin, cluster):
    Node.objects.filter(name="jupiter-01").update(drained=True, drain_reason="psu")
    client.force_login(cluster_admin)
    assert "drained, ready for repair" in client.get(reverse("operations")).content.decode()


def test_cluster_admin_drains_and_undrains_a_node(client, cluster_admin, cluster):
    node = cluster.nodes.get(name="jupiter-01")
    client.force_login(cluster_admin)
    url = reverse("node-drain", args=[node.pk])
    response = client.post(url, {"action": "drain", "reason": "replace a GPU"})
    node.refresh_from_db()
    assert response.status_code == 302 and node.drained and node.drain_reason == "replace a GPU"
    client.post(url, {"action": "undrain"})
    node.refresh_from_db()
    assert not node.drained


def test_a_drain_without_a_reason_is_refused_in_place(client, cluster_admin, cluster):
    node = cluster.nodes.get(name="jupiter-01")
    client.force_login(cluster_admin)
    response = client.post(
        reverse("node-drain", args=[node.pk]), {"action": "drain"}, headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    node.refresh_from_db()
    assert "<html" not in page and 'id="ops-nodes"' in page
    assert "say why the node is drained" in page and not node.drained


def test_leadership_sees_drains_but_gets_no_drain_forms(client, leader, cluster):
    node = cluster.nodes.get(name="jupiter-01")
    client.force_login(leader)
    assert (
        reverse("node-drain", args=[node.pk])
        not in client.get(reverse("operations")).content.decode()
    )
    assert client.post(reverse("node-drain", args=[node.pk]), {"reason": "x"}).status_code == 403
    node.refresh_from_db()
    assert not node.drained


def test_operations_query_count_does_not_grow_with_jobs(
    client, cluster_admin, cluster, budget_tree
):
    client.force_login(cluster_admin)
    counts = []
    for n in (3, 27):
        for _ in range(n):
            job = make_job(cluster_admin, cluster, budget_tree.tulu, state="running", gpus=1)
            JobEvent.objects.create(job=job, at=timezone.now(), kind="preempted")
        with CaptureQueriesContext(connection) as queries:
            client.get(reverse("operations"))
        counts.append(len(queries))
    assert counts == [OPERATIONS_PAGE_QUERIES, OPERATIONS_PAGE_QUERIES]


def test_operations_counts_preemptions_by_cause_and_emptied_drains(
    client, cluster_admin, cluster, busy
):
    now = timezone.now()
    messages = [
        "Its protection had ended and job 7 of nlp/olmo ranks above vision in the budget tree.",
        "Its protection had ended and job 8 of nlp/olmo ranks above vision in the budget tree.",
        "It ran unfunded and job 9 of nlp/tulu needed the GPUs.",
        "Node jupiter-01 is draining for maintenance and this job's protection has ended.",
    ]
    for message in messages:
        JobEvent.objects.create(job=busy["waiting"], at=now, kind="preempted", message=message)
    Node.objects.filter(name="jupiter-01").update(drained=True, drain_reason="psu")
    client.force_login(cluster_admin)
    page = client.get(reverse("operations")).content.decode()
    row = page[page.index(f'id="ops-causes-{cluster.pk}"') :]
    row = row[: row.index("</tr>")]
    cells = [c.split("<")[0] for c in row.split('<td class="num">')[1:]]
    assert cells == ["2", "1", "1", "1"]  # after protection, unfunded, drain; nodes emptied


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the SQL path is PostgreSQL's")
def test_the_database_computes_the_same_wait_percentiles_as_python(personas, cluster, budget_tree):
    """On PostgreSQL the percentiles come from percentile_disc; they equal the nearest-rank
    ones computed in Python over the same rows (sizes across every bucket, waits with
    fractions of a second, some starting before their submission is recorded)."""
    import random

    researcher, now = personas["researcher"], timezone.now()
    rng = random.Random(7)
    for _ in range(150):
        submitted = now - timedelta(seconds=rng.uniform(3600, 6 * 86400))
        make_job(
            researcher,
            cluster,
            budget_tree.olmo,
            state="completed",
            gpus=rng.choice([1, 1, 2, 8, 9, 64, 65, 128]),
            submitted_at=submitted,
            first_started_at=submitted + timedelta(seconds=rng.uniform(-5, 7200)),
        )
    since = now - reports.WAIT_WINDOW
    assert reports._wait_percentiles_in_sql(since) == reports._wait_percentiles_in_python(since)
