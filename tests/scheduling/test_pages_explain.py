"""'Why is this consuming GPU-hours': funding chain, rate and total, protection, standing,
what would preempt it, utilisation; and the job and explanation pages' query counts."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Job, JobEvent
from tests.budgets.factories import UsageEntryFactory
from tests.scheduling.test_pages_factories import cluster_fixture, make_job  # noqa: F401

pytestmark = pytest.mark.django_db
JOB_PAGE_QUERIES = 6
EXPLAIN_PAGE_QUERIES = 7

EXPLANATION = {
    "funded": True,
    "funding_chain": ["nlp", "nlp/olmo"],
    "standing": [
        {"path": "nlp", "share": 0.6667, "usage_share": 0.25, "level_fair_share": 2.67},
        {"path": "nlp/olmo", "share": 0.6, "usage_share": 0.9, "level_fair_share": 0.67},
    ],
    "preemptible_by": "Nothing until its protection ends; after that, a waiting funded job "
    "whose project ranks above nlp/olmo.",
}


@pytest.fixture
def running_job(researcher, cluster, budget_tree):
    job = make_job(
        researcher,
        cluster,
        budget_tree.olmo,
        state="running",
        gpus=8,
        name="pretrain",
        explanation=EXPLANATION,
        gpu_utilization=0.72,
        last_charged_at=timezone.now(),
    )
    UsageEntryFactory(
        node=budget_tree.olmo, job_ref=job.pk, gpu_seconds=7200, cost_gpu_seconds=7200
    )
    return job


def why(client, job, **headers):
    return client.get(reverse("job-explain", args=[job.pk]), headers=headers).content.decode()


def test_explanation_shows_who_pays_rate_total_and_protection(client, researcher, running_job):
    client.force_login(researcher)
    page = why(client, running_job)
    assert page.index("<code>nlp</code>") < page.index("<code>nlp/olmo</code>")
    assert "<strong>8.00</strong> GPU-hours charged per hour" in page
    assert "Charged so far: <strong>2.00</strong>" in page
    assert "protected</span> until" in page and "its runtime contract" in page
    assert "whose project ranks above nlp/olmo" in page


def test_explanation_shows_the_standing_of_each_ancestor_as_share_and_usage(
    client, researcher, running_job
):
    client.force_login(researcher)
    page = why(client, running_job)
    assert "width: 67%" in page and "width: 25%" in page  # nlp: share vs usage
    assert "width: 60%" in page and "width: 90%" in page  # olmo: over its share
    assert "bar usage over" in page


def test_explanation_names_an_exception_as_the_source_of_protection(
    client, researcher, running_job
):
    Job.objects.filter(pk=running_job.pk).update(protection_source="exception #12")
    client.force_login(researcher)
    assert "by exception #12" in why(client, running_job)


def test_an_idle_job_is_flagged(client, researcher, running_job):
    Job.objects.filter(pk=running_job.pk).update(
        gpu_utilization=0.02, low_utilization_since=timezone.now() - timedelta(hours=2)
    )
    client.force_login(researcher)
    page = why(client, running_job)
    assert "2 % busy" in page and 'badge bad">idle' in page


def test_a_recently_quiet_job_is_not_yet_idle(client, researcher, running_job):
    Job.objects.filter(pk=running_job.pk).update(
        gpu_utilization=0.02, low_utilization_since=timezone.now() - timedelta(minutes=20)
    )
    client.force_login(researcher)
    assert 'badge bad">idle' not in why(client, running_job)


def test_unfunded_job_says_it_is_free_and_preemptible(client, researcher, cluster):
    job = make_job(researcher, cluster, None, state="running", name="scavenger")
    client.force_login(researcher)
    page = why(client, job)
    assert "unfunded" in page and "It has no project" in page
    assert "<strong>0.00</strong> GPU-hours charged per hour" in page


def test_a_pending_job_costs_nothing(client, researcher, cluster, budget_tree):
    job = make_job(researcher, cluster, budget_tree.olmo)
    client.force_login(researcher)
    assert "holds no GPUs and costs nothing" in why(client, job)


@pytest.mark.parametrize(
    ("persona", "status"),
    [
        ("researcher", 200),
        ("manager", 200),
        ("leader", 200),
        ("cluster_admin", 200),
        ("other_manager", 404),
        ("outsider", 404),
    ],
)
def test_explanation_is_seen_by_those_who_see_the_job(
    client, personas, running_job, persona, status
):
    client.force_login(personas[persona])
    url = reverse("job-explain", args=[running_job.pk])
    assert client.get(url).status_code == status


def test_explanation_polls_while_running_and_stops_after(client, researcher, running_job):
    client.force_login(researcher)
    live = why(client, running_job, **{"HX-Request": "true"})
    assert "<html" not in live and 'id="why"' in live and 'hx-trigger="every 5s"' in live
    Job.objects.filter(pk=running_job.pk).update(state="completed")
    assert "hx-trigger" not in why(client, running_job, **{"HX-Request": "true"})


def _count(client, url):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def _crowd(researcher, cluster, budget_tree, job, n):
    for i in range(n):
        make_job(researcher, cluster, budget_tree.olmo, name=f"other-{i}")
        JobEvent.objects.create(job=job, at=timezone.now(), kind="note", message=f"event {i}")
        UsageEntryFactory(
            node=budget_tree.olmo, job_ref=job.pk, gpu_seconds=60, cost_gpu_seconds=60
        )


def test_job_page_query_count_is_pinned(client, researcher, running_job, django_assert_num_queries):
    client.force_login(researcher)
    with django_assert_num_queries(JOB_PAGE_QUERIES):
        client.get(reverse("job-detail", args=[running_job.pk]))


def test_explanation_page_query_count_is_pinned(
    client, researcher, running_job, django_assert_num_queries
):
    client.force_login(researcher)
    with django_assert_num_queries(EXPLAIN_PAGE_QUERIES):
        client.get(reverse("job-explain", args=[running_job.pk]))


def test_job_and_explanation_query_counts_do_not_grow_with_jobs_or_events(
    client, researcher, cluster, budget_tree, running_job
):
    client.force_login(researcher)
    pages = [
        reverse("job-detail", args=[running_job.pk]),
        reverse("job-explain", args=[running_job.pk]),
    ]
    _crowd(researcher, cluster, budget_tree, running_job, 3)
    few = [_count(client, url) for url in pages]
    _crowd(researcher, cluster, budget_tree, running_job, 27)
    many = [_count(client, url) for url in pages]
    assert few == many == [JOB_PAGE_QUERIES, EXPLAIN_PAGE_QUERIES]
