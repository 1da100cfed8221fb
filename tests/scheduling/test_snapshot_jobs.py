"""The pass reads its jobs without the ORM's row-to-instance path (``live_jobs``: one query of
rows, datetimes as microseconds, JSON columns as text, model instances built only for the jobs
the pass writes): what it reads must be what the ORM would load, attribute by attribute, for
waiting and running jobs alike, and the engine must see the same times as before."""

import datetime as dt

from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from scheduling.apply import apply_decisions
from scheduling.engine import schedule
from scheduling.live_jobs import JSON_READ, NOT_READ, READ, from_micros, micros
from scheduling.models import Job
from scheduling.snapshot import build_snapshot, epoch
from tests.scheduling.conftest import submit_many


def test_the_pass_reads_what_the_orm_loads(researcher, cluster, run_pass):
    submit_many(researcher, cluster, 6, gpus=8)  # two start (16 GPUs), four wait
    run_pass(cluster)
    run_pass(cluster)  # running jobs now carry explanations, waiting ones their report
    names = [f.attname for f in Job._meta.concrete_fields if f.name not in NOT_READ]
    expected = Job.objects.filter(cluster=cluster, state__in=["pending", "running"]).order_by(
        "submitted_at", "id"
    )
    jobs = build_snapshot(cluster).jobs
    read = [jobs[key] for key in jobs]

    assert names == list(READ)
    assert {"nodes", "explanation"} <= set(JSON_READ)
    assert [j.state for j in read].count("running") == 2
    assert any(j.explanation for j in read) and any(j.nodes for j in read)
    assert any(j.protected_until for j in read) and any(j.started_at for j in read)
    assert [j.pk for j in read] == [j.pk for j in expected]
    for mine, theirs in zip(read, expected, strict=True):
        assert {n: getattr(mine, n) for n in names} == {n: getattr(theirs, n) for n in names}
        assert {n: jobs.value(str(mine.pk), n) for n in names} == {
            n: getattr(theirs, n) for n in names
        }
        assert not mine._state.adding and mine._state.db == theirs._state.db
        assert mine.cluster is not None and (mine.project_id is None or mine.project)


def test_a_pass_builds_instances_only_for_the_jobs_it_writes(researcher, cluster):
    """Thousands of waiting jobs cost the pass their rows, not a model instance each: only
    its starts (and the running jobs it explains) become instances."""
    submit_many(researcher, cluster, 12, gpus=4)  # four start on the 16 GPUs, eight wait
    ctx = build_snapshot(cluster)
    decisions = schedule(ctx.snapshot)
    apply_decisions(ctx, decisions, timezone.now(), cluster)

    assert len(decisions.starts) == 4 and len(decisions.pending) == 8
    assert set(ctx.jobs.built) == {d.job_id for d in decisions.starts}
    assert Job.objects.filter(cluster=cluster, state="pending", queue_position=1).count() == 1


@given(st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)))
def test_microseconds_give_the_engine_the_same_seconds_as_the_datetime(naive):
    moment = naive.replace(tzinfo=dt.UTC)
    assert micros(moment) / 1_000_000 == epoch(moment)
    assert from_micros(micros(moment)) == moment
