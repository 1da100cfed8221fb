"""The SQLite pass applies many starts a few at a time, each part in a write transaction of its
own, so a submission waits for one part, not the whole backlog (the demo's first pass starts
59 jobs). The parts together write what one transaction would; anything that changes what the
rest rests on between two parts (another pass, a cancel) drops the rest and computes again.

Run on the suite's database, like tests/scheduling/test_pass_outside_lock.py: the parts and
their re-checks are plain transactions and queries. How long the first demo pass holds SQLite's
lock, before and after: scripts/bench-first-pass.py, docs/failure-modes.md."""

import pytest
import time_machine

from budgets.models import Lien
from scheduling import passes
from scheduling.models import Job, JobEvent
from scheduling.services import cancel_job
from tests.scheduling.test_live_pass import T0, remote_jobs, submit


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def parts_of_two(monkeypatch):
    """Two starts per transaction; returns the ``final`` flag of every part applied."""
    monkeypatch.setattr(passes, "STARTS_PER_TRANSACTION", 2)
    applied = []
    real = passes.apply_decisions

    def counting(ctx, decisions, now, cluster, *, final=True):
        applied.append(final)
        return real(ctx, decisions, now, cluster, final=final)

    monkeypatch.setattr(passes, "apply_decisions", counting)
    return applied


@pytest.fixture
def between_parts(monkeypatch):
    """``between_parts(action)``: ``action`` runs once, after the first part committed and
    before the second part's re-check, as another request or worker would."""

    def arrange(action):
        real = passes._stale
        checks = []

        def stale(*args):
            checks.append(1)
            if len(checks) == 2:
                action()
            return real(*args)

        monkeypatch.setattr(passes, "_stale", stale)

    return arrange


def _backlog(researcher, frozen):
    small = [submit(researcher, gpus=2, name=f"small-{i}") for i in range(5)]
    frozen.shift(1)  # submitted after them: it ranks last and waits for the whole cluster
    big = submit(researcher, gpus=16, name="big")
    return small, big


def test_a_pass_of_many_starts_applies_them_in_parts_and_writes_what_one_would(
    researcher, cluster, frozen, optimistic, parts_of_two
):
    small, big = _backlog(researcher, frozen)
    result = optimistic(cluster)
    assert parts_of_two == [False, False, True]  # 5 starts: 2 + 2 + 1, the reasons last
    assert result.ran and result.started == 5 and result.waiting == 1
    assert Job.objects.filter(pk__in=[j.pk for j in small], state=Job.State.RUNNING).count() == 5
    assert JobEvent.objects.filter(job__in=small, kind="running").count() == 5
    assert Lien.objects.filter(job_ref__in=[j.pk for j in small]).count() == 5
    assert len(remote_jobs(cluster)) == 5  # each part dispatched once it committed
    big.refresh_from_db()
    assert big.pending_code and big.queue_position == 1
    assert all(j.explanation["funding_chain"] for j in Job.objects.filter(state="running"))


def test_a_job_cancelled_between_two_parts_is_not_started_and_the_rest_computed_again(
    researcher, cluster, frozen, optimistic, parts_of_two, between_parts
):
    small, _ = _backlog(researcher, frozen)
    cancelled = []

    def cancel_one_still_waiting():
        waiting = Job.objects.filter(pk__in=[j.pk for j in small], state=Job.State.PENDING)
        cancelled.append(cancel_job(researcher, waiting.first().pk))

    between_parts(cancel_one_still_waiting)
    result = optimistic(cluster)
    [last] = cancelled
    last.refresh_from_db()
    assert last.state == Job.State.CANCELLED
    assert not JobEvent.objects.filter(job=last, kind="running").exists()
    assert result.ran and result.started == 4  # 2 from the first part, 2 computed again
    assert JobEvent.objects.filter(job__in=small, kind="running").count() == 4
    assert len(remote_jobs(cluster)) == 4


def test_another_pass_committing_between_two_parts_makes_this_one_compute_again(
    researcher, cluster, frozen, optimistic, parts_of_two, between_parts
):
    small, _ = _backlog(researcher, frozen)
    between_parts(lambda: passes.run_pass(cluster.pk))  # the locked pass, another worker
    optimistic(cluster)
    for job in small:  # each started once, by one pass or the other
        assert JobEvent.objects.filter(job=job, kind="running").count() == 1
        assert Lien.objects.filter(job_ref=job.pk).count() == 1
    assert len(remote_jobs(cluster)) == 5
