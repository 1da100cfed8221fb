"""The pages' queries use indexes on a job table of 100,000 finished jobs: EXPLAIN
on PostgreSQL, after ANALYZE, must show no sequential scan of the jobs or their events."""

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from scheduling import reports
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, submit_job

HISTORY = 100_000

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="query plans are PostgreSQL's"
)


def add_history(template: Job, count: int) -> None:
    """``count`` finished jobs over the last 90 days, copied from ``template`` in one INSERT
    (``generate_series``), two events each and a preemption for one in 50."""
    overrides = {
        "name": "'done-' || g",
        "state": "CASE WHEN g %% 9 = 0 THEN 'failed' ELSE 'completed' END",
        "submitted_at": "%(now)s::timestamptz - make_interval(secs => (g * 7919) %% 7776000)",
        "started_at": "%(now)s::timestamptz - make_interval(secs => (g * 7919) %% 7776000 - 600)",
        "first_started_at": (
            "%(now)s::timestamptz - make_interval(secs => (g * 7919) %% 7776000 - 600)"
        ),
        "ended_at": "%(now)s::timestamptz - make_interval(secs => (g * 7919) %% 7776000 - 4200)",
        "queue_position": "NULL",
        "attempt": "1",
    }
    columns = [f.column for f in Job._meta.concrete_fields if not f.primary_key]
    select = ", ".join(overrides.get(c, f"t.{connection.ops.quote_name(c)}") for c in columns)
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO scheduling_job ({', '.join(map(connection.ops.quote_name, columns))}) "
            f"SELECT {select} FROM scheduling_job t, generate_series(1, %(count)s) g "
            "WHERE t.id = %(template)s",
            {"now": now, "count": count, "template": template.pk},
        )
        for kind, every in (("running", 1), ("completed", 1), ("preempted", 50)):
            cursor.execute(
                "INSERT INTO scheduling_jobevent"
                " (job_id, at, kind, message, nodes, lost_gpu_seconds) "
                "SELECT id, started_at, %s, '', '[]'::jsonb, 0 FROM scheduling_job "
                "WHERE state IN ('completed', 'failed') AND id %% %s = 0",
                [kind, every],
            )
        cursor.execute("ANALYZE scheduling_job")
        cursor.execute("ANALYZE scheduling_jobevent")


@pytest.fixture
def large_history(researcher, cluster, run_pass):
    jobs = [
        submit_job(
            researcher,
            JobRequest(
                name=f"t{index}",
                project="nlp/olmo",
                cluster=cluster.name,
                gpus=4,
                min_runtime_s=3600,
                sim_duration_s=7200,
            ),
        )
        for index in range(12)
    ]
    run_pass(cluster)  # four run, eight wait
    add_history(jobs[0], HISTORY)
    assert Job.objects.count() == HISTORY + 12
    return cluster


def page_queries(cluster):
    """The queries behind the queue, running and operations pages (scheduling.views)."""
    now = timezone.now()
    return {
        "queue: waiting": Job.objects.for_queue_page(cluster)[:50],
        "queue: running": Job.objects.running_on_queue_page(cluster),
        "running overview": Job.objects.for_running_overview().order_by("project__path", "id"),
        "clusters: counts": Job.objects.active().values_list("cluster_id").order_by(),
        "operations: occupancy": Job.objects.for_occupancy(),
        "operations: waits": Job.objects.for_wait_times(now - reports.WAIT_WINDOW),
        "operations: preemptions": JobEvent.objects.filter(
            kind="preempted", at__gte=now - reports.PREEMPTION_WINDOW
        ).values_list("job__cluster_id"),
    }


def test_the_pages_read_jobs_and_events_through_indexes_at_100k_jobs(large_history):
    # The queries have rows to skip, and those they must find.
    since = timezone.now() - dt.timedelta(days=7)
    assert Job.objects.filter(first_started_at__gte=since).count() > 5_000
    assert Job.objects.running().count() == 4
    assert JobEvent.objects.filter(kind="preempted").count() >= HISTORY // 50 - 1

    for page, queryset in page_queries(large_history).items():
        plan = queryset.explain()
        assert "Seq Scan on scheduling_job " not in plan + " ", (page, plan)
        assert "Seq Scan on scheduling_jobevent" not in plan, (page, plan)
        assert "Index" in plan, (page, plan)
