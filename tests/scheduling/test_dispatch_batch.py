"""A pass's starts are written in bulk and dispatched in one message, not one per job."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import dispatch, enqueue
from scheduling.backends.base import BackendUnavailable
from scheduling.models import Job, JobEvent
from tests.scheduling.conftest import make_cluster
from tests.scheduling.conftest import submit_many as backlog


def test_a_pass_sends_its_starts_in_one_message_and_every_one_is_launched(
    researcher, cluster, run_pass, monkeypatch
):
    sent = []
    real = enqueue.on_commit
    monkeypatch.setattr(
        enqueue, "on_commit", lambda name, *args: (sent.append((name, args)), real(name, *args))
    )
    jobs = backlog(researcher, cluster, 10)

    result = run_pass(cluster)

    assert result.started == 10
    assert [name for name, _ in sent] == [enqueue.DISPATCH_STARTS]
    rows = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")
    assert sorted(map(tuple, sent[0][1][0])) == sorted((j.pk, j.attempt_key) for j in rows)
    assert all(j.state == "running" and j.dispatched and j.external_id for j in rows)
    assert JobEvent.objects.filter(job__in=rows, kind="running").count() == 10


def test_starts_are_sent_in_messages_of_a_bounded_size(researcher, cluster, run_pass, monkeypatch):
    sent = []
    monkeypatch.setattr(dispatch, "STARTS_PER_MESSAGE", 4)
    monkeypatch.setattr(enqueue, "on_commit", lambda name, *args: sent.append((name, args)))
    backlog(researcher, cluster, 10)

    run_pass(cluster)

    assert [len(args[0]) for _, args in sent] == [4, 4, 2]


def test_a_start_the_backend_cannot_take_now_is_retried_alone(researcher, cluster, monkeypatch):
    launched, retried = [], []

    def start(job_id, key):
        if job_id == 2:
            raise BackendUnavailable("slurmctld is not answering")
        launched.append(job_id)
        return True

    monkeypatch.setattr(dispatch, "start_on_backend", start)
    monkeypatch.setattr(enqueue, "start", lambda job_id, key: retried.append((job_id, key)))

    assert dispatch.start_many_on_backend([(1, "1-1-a"), (2, "2-1-b"), (3, "3-1-c")]) == 2
    assert launched == [1, 3]
    assert retried == [(2, "2-1-b")]


def test_a_pass_runs_as_many_queries_for_12_starts_as_for_2(researcher, tmp_path, run_pass):
    few_cluster = make_cluster(tmp_path / "a", name="few")
    many_cluster = make_cluster(tmp_path / "b", name="many")
    backlog(researcher, few_cluster, 2)
    # 12: SQLite applies a pass's starts in parts of 12 (passes.STARTS_PER_TRANSACTION).
    backlog(researcher, many_cluster, 12)

    with CaptureQueriesContext(connection) as few:
        few_result = run_pass(few_cluster)
    with CaptureQueriesContext(connection) as many:
        many_result = run_pass(many_cluster)

    assert (few_result.started, many_result.started) == (2, 12)
    # The dispatch runs after commit (eagerly here) and reads each job: count the pass alone.
    assert _pass_queries(few) == _pass_queries(many)


def _pass_queries(captured) -> int:
    """Statements up to and including the pass's last write (the cluster's last_pass_at)."""
    sqls = [q["sql"] for q in captured.captured_queries]
    last = max(i for i, sql in enumerate(sqls) if "last_pass_ms" in sql and "UPDATE" in sql)
    return last + 1
