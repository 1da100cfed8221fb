"""``insert_linked`` writes a job and its events as one statement on PostgreSQL
(the hottest write): rows must be what the ORM's ``save()`` writes, instances must come back
saved, and a failing child must leave no parent behind."""

import datetime as dt

import pytest
from django.db import DataError, IntegrityError, connection
from django.db.models import signals
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.insert_linked import insert_linked
from scheduling.models import Job, JobEvent
from tests.scheduling.conftest import make_cluster

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=dt.UTC)


def _job(owner, cluster, project, **extra):
    fields = {
        "name": "train", "owner": owner, "project": project, "cluster": cluster, "gpus": 2,
        "min_runtime_s": 900, "command": "python train.py", "env": {"SEED": "7", "É": "ü"},
        "sim_duration_s": 1200, "submitted_at": NOW, "pending_code": "New",
        "pending_message": "Waiting for the next scheduling pass.",
    }  # fmt: skip
    return Job(**{**fields, **extra})


def _row(model, pk) -> dict:
    row = model.objects.filter(pk=pk).values().get()
    row.pop("id")
    return row


def test_the_rows_are_those_the_orm_writes(researcher, budget_tree, tmp_path):
    cluster = make_cluster(tmp_path)
    by_orm = _job(researcher, cluster, budget_tree.olmo)
    by_orm.save()
    JobEvent.objects.create(
        job=by_orm, at=NOW, kind="submitted", message="2 GPUs", nodes=[["a", 1]]
    )
    linked = _job(researcher, cluster, budget_tree.olmo)
    first = JobEvent(at=NOW, kind="submitted", message="2 GPUs", nodes=[["a", 1]])
    second = JobEvent(at=NOW, kind="protection", message="")
    insert_linked(linked, [first, second], "job")

    assert linked.pk and linked.pk != by_orm.pk and not linked._state.adding
    assert linked._state.db == "default"
    assert _row(Job, linked.pk) == _row(Job, by_orm.pk)
    assert [e.kind for e in linked.events.order_by("id")] == ["submitted", "protection"]
    assert first.pk < second.pk and first.job is linked and not first._state.adding
    event = _row(JobEvent, first.pk)
    assert event == {**_row(JobEvent, by_orm.events.get().pk), "job_id": linked.pk}
    reread = Job.objects.get(pk=linked.pk)
    assert reread.env == {"SEED": "7", "É": "ü"} and reread.submitted_at == NOW


def test_one_statement_on_postgresql_and_a_transaction_elsewhere(researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    with CaptureQueriesContext(connection) as queries:
        insert_linked(_job(researcher, cluster, None), [JobEvent(at=NOW, kind="k")], "job")
    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    assert len(inserts) == (1 if connection.vendor == "postgresql" else 2), inserts


@pytest.mark.django_db(transaction=True)  # no test transaction: the statement alone decides
def test_a_child_that_cannot_be_written_leaves_no_parent(researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    before = Job.objects.count()
    too_long = JobEvent(at=NOW, kind="k" * 33)  # kind is at most 32 characters
    errors = (DataError, IntegrityError) if connection.vendor == "postgresql" else ()
    if connection.vendor != "postgresql":  # SQLite does not enforce lengths: a missing time
        too_long = JobEvent(at=None, kind="k")
        errors = (IntegrityError,)
    with pytest.raises(errors):
        insert_linked(_job(researcher, cluster, None), [too_long], "job")
    assert Job.objects.count() == before


def test_a_model_with_save_signals_is_saved_through_the_orm(researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    heard = []

    def receiver(sender, instance, created, **kwargs):
        heard.append((sender, created))

    signals.post_save.connect(receiver, sender=JobEvent)
    try:
        job = _job(researcher, cluster, None, submitted_at=timezone.now())
        insert_linked(job, [JobEvent(at=NOW, kind="submitted")], "job")
    finally:
        signals.post_save.disconnect(receiver, sender=JobEvent)
    assert heard == [(JobEvent, True)]
    assert job.events.count() == 1
