"""One charging run costs a constant number of statements, whatever the number of running jobs
(the benchmark runs 5,000), and still charges each job exactly what it owes."""

import datetime as dt

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from budgets.models import Lien, UsageEntry
from scheduling import passes
from scheduling.accounting import charge_running_jobs
from scheduling.models import Job
from tests.scheduling.conftest import make_cluster, submit_many

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def start_jobs(user, cluster, count, gpus) -> list[Job]:
    jobs = submit_many(user, cluster, count, gpus, min_runtime_s=1800, sim_duration_s=36000)
    passes.run_pass(cluster.pk)
    started = list(Job.objects.filter(pk__in=[j.pk for j in jobs], state="running"))
    assert len(started) == count
    return started


def charge_counted() -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        charged = charge_running_jobs()
    return len(queries), charged


def test_charging_30_running_jobs_runs_as_many_statements_as_charging_3(
    researcher, budget_tree, tmp_path, clock
):
    small = make_cluster(tmp_path / "a", name="small", nodes=1)
    large = make_cluster(tmp_path / "b", name="large", nodes=8, gpu_type="B200", factor="2.000")
    start_jobs(researcher, small, 3, gpus=2)
    clock.shift(dt.timedelta(minutes=5))
    few_queries, few_charged = charge_counted()

    start_jobs(researcher, large, 30, gpus=2)
    clock.shift(dt.timedelta(minutes=5))
    many_queries, many_charged = charge_counted()

    assert few_charged == 3 * 2 * 300
    assert many_charged == 3 * 2 * 300 + 30 * 2 * 300
    assert many_queries == few_queries
    assert few_queries <= 10


def test_each_job_is_charged_exactly_its_interval_at_its_price_and_its_lien_shrinks(
    researcher, budget_tree, tmp_path, clock
):
    h100 = start_jobs(researcher, make_cluster(tmp_path / "a", name="h", nodes=1), 2, gpus=3)
    b200 = start_jobs(
        researcher,
        make_cluster(tmp_path / "b", name="b", nodes=1, gpu_type="B200", factor="1.700"),
        1,
        gpus=7,
    )
    clock.shift(dt.timedelta(seconds=301))
    charge_running_jobs()
    clock.shift(dt.timedelta(seconds=7))
    charge_running_jobs()
    charge_running_jobs()  # nothing new to charge: writes nothing

    for job, factor in [(h100[0], 1), (h100[1], 1), (b200[0], 1.7)]:
        rows = list(UsageEntry.objects.filter(job_ref=job.pk).order_by("interval_start"))
        spans = [(r.interval_start, r.interval_end, r.gpu_seconds) for r in rows]
        assert spans == [
            (T0, T0 + dt.timedelta(seconds=301), job.gpus * 301),
            (T0 + dt.timedelta(seconds=301), T0 + dt.timedelta(seconds=308), job.gpus * 7),
        ]
        # rounded half up per interval, as ledger.cost_of does
        costs = [round(job.gpus * 301 * factor + 1e-9), round(job.gpus * 7 * factor + 1e-9)]
        assert [r.cost_gpu_seconds for r in rows] == costs
        assert all(r.node_id == budget_tree.olmo.pk and r.user_id == job.owner_id for r in rows)
        lien = Lien.objects.get(job_ref=job.pk)
        assert lien.charged_gpu_seconds == sum(costs)
        job.refresh_from_db()
        assert job.last_charged_at == T0 + dt.timedelta(seconds=308)
