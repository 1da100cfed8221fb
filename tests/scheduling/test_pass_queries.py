"""A pass's cost in queries does not grow with the queue: the waiting jobs' report and the
running jobs' explanations are written in bulk (scheduling.bulk_writes)."""

import datetime as dt
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core import bulk_sql
from scheduling import bulk_writes
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.scheduling.conftest import make_cluster


def backlog(user, cluster, count):
    for index in range(count):
        submit_job(
            user,
            JobRequest(
                name=f"train-{index}",
                project="nlp/olmo",
                cluster=cluster.name,
                gpus=16,  # the whole cluster: one starts, every other one waits
                min_runtime_s=3600,
                sim_duration_s=7200,
            ),
        )


def queries_of_first_pass(run_pass, cluster) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as queries:
        result = run_pass(cluster)
    return len(queries), result


def test_a_pass_runs_as_many_queries_for_200_waiting_jobs_as_for_20(researcher, tmp_path, run_pass):
    small = make_cluster(tmp_path / "a", name="small")
    large = make_cluster(tmp_path / "b", name="large")
    backlog(researcher, small, 20)
    backlog(researcher, large, 200)

    few, few_result = queries_of_first_pass(run_pass, small)
    many, many_result = queries_of_first_pass(run_pass, large)

    assert (few_result.started, many_result.started) == (1, 1)
    assert many == few
    positions = list(
        Job.objects.filter(cluster=large, state="pending")
        .order_by("queue_position")
        .values_list("queue_position", flat=True)
    )
    assert positions == list(range(1, 200))  # every waiting job's report was written


@pytest.mark.parametrize("writer", ["_from_json", "_each"])
def test_the_bulk_writer_stores_what_the_orm_would_store(researcher, cluster, writer, monkeypatch):
    if writer == "_from_json" and connection.vendor != "postgresql":
        pytest.skip("UPDATE ... FROM json_to_recordset(...) is the PostgreSQL path")
    monkeypatch.setattr(
        bulk_sql, "_from_json" if writer == "_each" else "_each", getattr(bulk_sql, writer)
    )
    backlog(researcher, cluster, 3)
    first, second, third = Job.objects.filter(cluster=cluster).order_by("pk")
    later = timezone.now().replace(microsecond=123456) + dt.timedelta(hours=2)
    bulk_writes.write_report(
        [
            (first.pk, "Resources", "waits for 16 GPUs; it's 'quoted'", 1, later),
            (second.pk, "Priority", "behind job #1", 2, None),
        ]
    )
    first.explanation = {"funded": True, "standing": [{"path": "nlp", "share": 0.5}]}
    bulk_writes.write_explanations([first])

    first.refresh_from_db()
    second.refresh_from_db()
    third.refresh_from_db()
    assert (first.pending_code, first.queue_position, first.estimated_start) == (
        "Resources",
        1,
        later,
    )
    assert first.pending_message == "waits for 16 GPUs; it's 'quoted'"
    assert first.explanation == {"funded": True, "standing": [{"path": "nlp", "share": 0.5}]}
    assert (second.pending_code, second.queue_position, second.estimated_start) == (
        "Priority",
        2,
        None,
    )
    assert (third.pending_code, third.queue_position) == ("New", None)  # untouched


def _hot_updates() -> tuple[int, int]:
    """Row updates of the job table in this transaction, and how many were heap-only."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_updated(c.oid), "
            "pg_stat_get_xact_tuples_hot_updated(c.oid) FROM pg_class c "
            "WHERE c.relname = 'scheduling_job'"
        )
        return cursor.fetchone()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="fill factor is PostgreSQL's")
def test_the_waiting_report_is_written_beside_the_rows_not_into_every_index(
    researcher, tmp_path, run_pass
):
    """The job table fills only 40 % of each page (migration 0009), so a pass rewriting
    the reason and position of every waiting job touches no index: the updates are
    heap-only. With full pages nearly every one of them was a new entry in all the indexes."""
    cluster = make_cluster(tmp_path)
    backlog(researcher, cluster, 300)
    before_updated, before_hot = _hot_updates()
    run_pass(cluster)
    updated, hot = _hot_updates()
    updated, hot = updated - before_updated, hot - before_hot
    assert updated >= 299  # the report of every waiting job, and the start
    assert hot >= 0.9 * updated, (updated, hot)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the JSON document is PostgreSQL's")
def test_the_bulk_writer_sends_rows_in_key_order(researcher, cluster):
    """Rows go in id order whatever order the report has (queue order): the table and its
    primary key are then walked in order, and every writer locks rows in the same order."""
    backlog(researcher, cluster, 4)
    ids = list(Job.objects.filter(cluster=cluster).order_by("pk").values_list("pk", flat=True))
    rows = [(pk, "Priority", f"#{pk}", position, None) for position, pk in enumerate(ids[::-1])]
    sent = []

    def keep(execute, sql, params, many, context):
        sent.extend(row[0] for row in json.loads(params[-1]))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        bulk_writes.write_report(rows)

    assert sent == ids
    by_position = Job.objects.filter(cluster=cluster).order_by("queue_position")
    assert list(by_position.values_list("pk", flat=True)) == ids[::-1]


def test_repeated_messages_are_stored_exactly(researcher, cluster):
    """A report's messages repeat (a dozen sentences for thousands of jobs), so the writer
    sends each once (``bulk_sql._pooled``): what is stored is still each row's own text,
    whatever characters it holds."""
    backlog(researcher, cluster, 12)
    ids = list(Job.objects.filter(cluster=cluster).order_by("pk").values_list("pk", flat=True))
    sentences = ['waits for "nlp/olmo", {x}; a\\b', "l'été, 16 GPUs"]
    rows = [(pk, "Priority", sentences[i % 2], i + 1, None) for i, pk in enumerate(ids)]
    rows[5] = (ids[5], "Resources", "", 6, None)
    with CaptureQueriesContext(connection) as queries:
        bulk_writes.write_report(rows)

    stored = list(
        Job.objects.filter(cluster=cluster)
        .order_by("pk")
        .values_list("pk", "pending_code", "pending_message", "queue_position", "estimated_start")
    )
    assert stored == rows
    if connection.vendor == "postgresql":
        assert "text[]" in queries.captured_queries[-1]["sql"]  # sent once each


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the cast is PostgreSQL's")
def test_the_bulk_writer_refuses_a_value_too_long_for_its_column(researcher, cluster):
    """Values are cast to their column's type without its length, so a value too long is
    refused when stored, as by the ORM, never cut short silently."""
    from django.db import DataError, transaction

    backlog(researcher, cluster, 1)
    job = Job.objects.get(cluster=cluster)
    with pytest.raises(DataError), transaction.atomic():
        bulk_writes.write_report([(job.pk, "X" * 33, "m", 1, None)])
    job.refresh_from_db()
    assert job.pending_code == "New"


def test_a_pass_that_changes_no_report_writes_none(researcher, tmp_path, run_pass):
    """The waiting report is compared with the rows the pass read: a second pass on an
    unchanged queue writes no report row."""
    cluster = make_cluster(tmp_path)
    backlog(researcher, cluster, 30)
    run_pass(cluster)

    with CaptureQueriesContext(connection) as queries:
        result = run_pass(cluster)

    assert (result.started, result.waiting) == (0, 29)
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert not [sql for sql in writes if "pending_message" in sql]
