"""``core.raw_rows`` builds instances from hand-written SQL for the lookups every API call
makes: each must equal the ORM's instance, field by field, whatever the
column types (JSON, datetimes, floats, nulls) and whatever the table's own column order."""

import datetime as dt

import pytest
from django.db import connection

from core.raw_rows import reading, table
from scheduling.models import Cluster, Job
from scheduling.services import _cluster_for
from tests.scheduling.conftest import make_cluster, submit_many

pytestmark = pytest.mark.django_db


def _read_all(model) -> list:
    rows = reading(model)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {rows.columns('x')} FROM {table(model)} x ORDER BY x.id")
        return [rows.instance(row) for row in cursor.fetchall()]


def _same(built, expected) -> None:
    assert type(built) is type(expected)
    for field in type(expected)._meta.concrete_fields:
        assert getattr(built, field.attname) == getattr(expected, field.attname), field.name
    assert not built._state.adding and built._state.db == "default"


def test_jobs_read_by_hand_are_the_orms_jobs(researcher, tmp_path):
    cluster = make_cluster(tmp_path)
    jobs = submit_many(researcher, cluster, 2)
    Job.objects.filter(pk=jobs[0].pk).update(
        nodes=[["jupiter-00", 8]],
        env={"SEED": "7"},
        gpu_utilization=0.25,
        protected_until=dt.datetime(2026, 12, 2, 3, 4, 5, 678901, tzinfo=dt.UTC),
        explanation={"why": ["a", 1, None]},
    )
    built = _read_all(Job)
    expected = list(Job.objects.order_by("id"))
    assert len(built) == len(expected) == 2
    for one, other in zip(built, expected, strict=True):
        _same(one, other)
    assert built[0].protected_until.tzinfo is not None and built[0].nodes == [["jupiter-00", 8]]


def test_the_submission_cluster_lookup_is_the_orms_cluster_with_its_shape(tmp_path):
    cluster = make_cluster(tmp_path, nodes=3, gpus=4, options={"partition": "gpu"})
    cluster.nodes.filter(name="jupiter-02").update(present=False)
    found = _cluster_for("jupiter")
    _same(found, Cluster.objects.get(pk=cluster.pk))
    assert found.options["partition"] == "gpu"
    assert (found.present_gpus, found.largest_node_gpus) == (8, 4)
