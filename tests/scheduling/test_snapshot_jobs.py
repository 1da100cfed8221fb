"""The pass reads its jobs without the ORM's row-to-instance path (``snapshot._live_jobs``:
instances built from rows, JSON columns parsed from their text): what it reads must be what
the ORM would load, attribute by attribute, for waiting and running jobs alike."""

from scheduling.models import Job
from scheduling.snapshot import JSON_READ, NOT_READ, _live_jobs
from tests.scheduling.conftest import submit_many


def test_the_pass_reads_what_the_orm_loads(researcher, cluster, run_pass):
    submit_many(researcher, cluster, 6, gpus=8)  # two start (16 GPUs), four wait
    run_pass(cluster)
    run_pass(cluster)  # running jobs now carry explanations, waiting ones their report
    names = [f.attname for f in Job._meta.concrete_fields if f.name not in NOT_READ]
    expected = Job.objects.filter(cluster=cluster, state__in=["pending", "running"]).order_by(
        "submitted_at", "id"
    )
    read = _live_jobs(cluster)

    assert {"nodes", "explanation"} <= set(JSON_READ)
    assert [j.state for j in read].count("running") == 2
    assert any(j.explanation for j in read) and any(j.nodes for j in read)
    assert [j.pk for j in read] == [j.pk for j in expected]
    for mine, theirs in zip(read, expected, strict=True):
        assert {n: getattr(mine, n) for n in names} == {n: getattr(theirs, n) for n in names}
        assert not mine._state.adding and mine._state.db == theirs._state.db
