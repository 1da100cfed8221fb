"""bench_live builds its scenario, runs the live passes and the pages, prints one JSON line,
and never writes into a database that already holds jobs unless told to."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import Cluster, Job

KEYS = {
    "database", "nodes", "gpus", "jobs", "history", "repeat", "waiting", "total_s",
    *(f"{p}_{k}" for p in ("fill", "refill", "steady") for k in ("ms", "started", "queries")),
    *(
        f"{p}_{k}"
        for p in ("queue_page", "operations_page")
        for k in ("ms", "p95_ms", "bytes", "queries")
    ),
    "charge_ms", "charge_jobs", "charge_queries",
}  # fmt: skip


def bench(*args) -> dict:
    out = StringIO()
    call_command(
        "bench_live", "--jobs", "50", "--nodes", "4", "--repeat", "1", "--charge-jobs", "40",
        *args, stdout=out,
    )  # fmt: skip
    [line] = out.getvalue().splitlines()
    return json.loads(line)


def test_bench_live_runs_the_passes_and_pages_and_prints_one_json_line(db):
    report = bench("--history", "30")

    assert set(report) == KEYS
    assert (report["nodes"], report["gpus"], report["jobs"]) == (4, 32, 50)
    assert report["fill_started"] > 0  # the backlog filled the empty cluster
    assert report["refill_started"] > 0  # what the cancellations freed was used again
    assert report["steady_started"] == 0
    assert report["waiting"] == Job.objects.filter(state="pending").count() > 0
    assert (
        Job.objects.filter(state="completed").count() + Job.objects.filter(state="failed").count()
        == 30
    )
    assert report["queue_page_bytes"] > 0 and report["operations_page_queries"] > 0
    for page in ("queue_page", "operations_page"):  # over 20 renderings at the least
        assert report[f"{page}_p95_ms"] >= report[f"{page}_ms"] > 0
    assert report["charge_jobs"] == 40 and report["charge_queries"] > 0
    assert Job.objects.filter(name__startswith="charged-").count() == 0  # rolled back


def test_bench_live_refuses_a_database_that_already_has_jobs(db):
    bench()
    clusters = Cluster.objects.count()
    jobs = Job.objects.count()

    with pytest.raises(CommandError, match="--force"):
        bench()

    assert (Cluster.objects.count(), Job.objects.count()) == (clusters, jobs)
    forced = bench("--force")
    assert forced["fill_started"] > 0
    assert Cluster.objects.count() == clusters + 1
