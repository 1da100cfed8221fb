"""Charges given back, and when: never twice, never past a real end.

Charging goes no further than the cluster's last sync, so an outage alone never charges past a
job's real end (tests/scheduling/test_backend_outage.py). Three things still charge beyond what
the job really used, and each is given back by reversal rows when the truth arrives:

1. the backend confirms a finished job as running — Slurm keeps it COMPLETING (nodes held,
   reported running) after its work ended — so the charge reaches that sync, past the end;
2. a cluster never synced charges provisionally to now;
3. the backend starts the attempt later than the pass decided (the dispatch was lost and
   reconcile sent it again; Slurm queued it): charges before the real start go back;
4. Allot preempts or cancels a job whose work had already ended on the backend (during an
   outage, or while Slurm still showed it COMPLETING): it is charged to Allot's stop, and when
   reconcile or the stop task learns the real end, what lies beyond it goes back, once; a
   preempted job then ends as the backend says instead of running again.
"""

import datetime as dt

import pytest
import time_machine

from budgets.models import GpuType, Lien, UsageEntry
from scheduling import dispatch, passes
from scheduling.accounting import charge_running_jobs
from scheduling.backends import base as backend_base
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, cancel_job, set_node_drain, submit_job
from tests.scheduling.test_live_loop_stateful import CompletingBackend

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def completing(monkeypatch):
    """The simulated backend, keeping a finished job COMPLETING for ten minutes."""
    monkeypatch.setitem(
        backend_base._REGISTRY, "simulated", f"{CompletingBackend.__module__}.CompletingBackend"
    )
    monkeypatch.setattr(CompletingBackend, "completing_s", 600)


def _submit(researcher, duration_s=1800, min_runtime_s=3600, resumable=False):
    return submit_job(
        researcher,
        JobRequest(
            name="t", project="nlp/olmo", cluster="jupiter", gpus=2,
            min_runtime_s=min_runtime_s, resumable=resumable, sim_duration_s=duration_s,
        ),
    )  # fmt: skip


def _ledger(job):
    return list(UsageEntry.objects.filter(job_ref=job.pk).order_by("pk"))


def test_a_job_still_completing_is_charged_past_its_end_and_given_back_when_it_reports(
    researcher, cluster, frozen, run_pass, completing
):
    job = _submit(researcher)
    run_pass(cluster)
    frozen.shift(300 * S)
    assert sync_cluster(cluster.pk).finished == []
    frozen.shift(1800 * S)  # its work ended at T0 + 1800 s; the backend still says running
    assert sync_cluster(cluster.pk).finished == []
    charge_running_jobs()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2100  # to the last sync

    frozen.shift(600 * S)
    assert sync_cluster(cluster.pk).finished == [job.pk]
    job.refresh_from_db()
    assert job.state == Job.State.COMPLETED
    assert job.ended_at == job.last_charged_at == T0 + 1800 * S
    charge, reversal = _ledger(job)
    assert reversal.reverses_id == charge.pk  # appended, never a delete
    assert (reversal.gpu_seconds, reversal.cost_gpu_seconds) == (-2 * 300, -2 * 300)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1800
    assert not Lien.objects.filter(job_ref=job.pk, released_at__isnull=True).exists()
    sync_cluster(cluster.pk)
    charge_running_jobs()
    assert len(_ledger(job)) == 2  # a charge is reversed once; nothing more is charged


def test_the_reversal_is_written_with_the_close_or_not_at_all(
    researcher, cluster, frozen, run_pass, completing, monkeypatch
):
    """Reversal and close share one transaction: a crash between them leaves neither."""
    from scheduling import reconcile

    job = _submit(researcher)
    run_pass(cluster)
    frozen.shift(2100 * S)
    sync_cluster(cluster.pk)
    charge_running_jobs()
    frozen.shift(600 * S)

    dying = True

    def crash(name):
        if dying and name == "reconcile.finish_charged":
            raise RuntimeError("worker died")

    monkeypatch.setattr(reconcile, "fault_point", crash)
    with pytest.raises(RuntimeError):
        sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert [e.gpu_seconds for e in _ledger(job)] == [2 * 2100]
    dying = False
    sync_cluster(cluster.pk)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1800


def test_a_cluster_never_synced_charges_to_now_and_its_first_sync_gives_back_the_excess(
    researcher, cluster, frozen, run_pass
):
    job = _submit(researcher)
    run_pass(cluster)
    frozen.shift(2400 * S)  # ended at 1800 s; nobody has synced this cluster yet
    charge_running_jobs()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2400
    assert sync_cluster(cluster.pk).finished == [job.pk]
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1800
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 1800


def test_charges_before_a_start_the_backend_confirms_later_are_given_back(
    researcher, cluster, frozen
):
    """The pass decided the start at T0 but its dispatch never ran; the cluster, never synced,
    charges provisionally from the decided start. Reconcile sends the start two minutes late:
    the attempt cannot have started before, so what was charged before goes back there and
    protection counts from it, before any sync reports the start (a lost attempt would
    otherwise keep the charges and the progress of time it never ran)."""
    job = _submit(researcher, duration_s=7200)
    passes.run_pass(cluster.pk)  # decided at T0; its dispatch never ran (no commit here)
    frozen.shift(120 * S)
    charge_running_jobs()  # never synced: to now, from the decided start
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 120
    assert sync_cluster(cluster.pk).redispatched == [job.pk]  # really starts now
    job.refresh_from_db()
    assert job.started_at == T0 + 120 * S
    assert job.protected_until == T0 + 120 * S + 3600 * S
    assert sum(e.gpu_seconds for e in _ledger(job)) == 0
    assert all(e.reverses_id for e in _ledger(job)[1:])  # appended, never a delete
    frozen.shift(60 * S)
    sync_cluster(cluster.pk)  # the backend reports the start it made: the same
    job.refresh_from_db()
    assert job.started_at == T0 + 120 * S
    charge_running_jobs()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 60


def test_a_late_confirmed_restart_gives_back_only_its_own_early_charges(
    researcher, cluster, frozen, run_pass
):
    """Found by the state machine: confirming a restarted attempt's later start reversed the
    charges of the job's earlier attempt too, which ran and was paid for."""
    from scheduling import dispatch

    job = _submit(researcher, duration_s=7200)
    run_pass(cluster)
    frozen.shift(600 * S)
    sync_cluster(cluster.pk)
    charge_running_jobs()
    job.refresh_from_db()
    dispatch.backend_for(cluster).preempt(job.pk, job.external_id)  # stopped outside Allot
    assert sync_cluster(cluster.pk).lost == [job.pk]  # requeued, charged to its end
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 600

    passes.run_pass(cluster.pk)  # the second attempt, decided at 600 s; its dispatch is lost
    frozen.shift(60 * S)
    assert sync_cluster(cluster.pk).redispatched == [job.pk]
    charge_running_jobs()
    sync_cluster(cluster.pk)  # confirms the second attempt's start at 660 s
    job.refresh_from_db()
    assert (job.attempt, job.started_at) == (2, T0 + 660 * S)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 600  # the first attempt stays paid


def test_a_charge_that_begins_at_a_start_confirmed_late_stands(researcher, cluster, frozen):
    """The pass decided the start at T0 while the backend was down; the cluster, never synced,
    charges to now: [T0, 30 s) when the retried dispatch sends it, at 30 s, then from there.
    The sync that reports the real start (30 s) gives back the charge before it; the one
    beginning at it stands. Giving back every charge to charge the span from the real start
    again charged nothing (a charge from 30 s exists, and a job interval is charged once):
    the job kept none of its run (found by the live-loop state machine)."""
    job = _submit(researcher, duration_s=7200)
    backend = dispatch.backend_for(cluster)
    backend.set_outage(True)
    passes.run_pass(cluster.pk)  # decided at T0; its dispatch task waits for the backend
    frozen.shift(30 * S)
    charge_running_jobs()  # never synced: to now, from the decided start
    backend.set_outage(False)
    job.refresh_from_db()
    assert dispatch.start_on_backend(job.pk, job.attempt_key)  # really starts at 30 s
    frozen.shift(600 * S)
    charge_running_jobs()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 630
    sync_cluster(cluster.pk)  # reports the real start
    job.refresh_from_db()
    assert (job.started_at, job.last_charged_at) == (T0 + 30 * S, T0 + 630 * S)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 600
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 600
    frozen.shift(60 * S)
    sync_cluster(cluster.pk)
    charge_running_jobs()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 660


def _ended_in_an_outage(researcher, cluster, frozen, run_pass, synced=True):
    """A resumable 2-GPU job (protected 600 s) whose work ends at 1800 s while the backend
    is down; 40 minutes in, still down, Allot has not heard of the end. The last sync that
    reached the backend saw it running at 300 s (none, if not ``synced``)."""
    job = submit_job(
        researcher,
        JobRequest(
            name="t", project="nlp/olmo", cluster="jupiter", gpus=2,
            min_runtime_s=600, sim_duration_s=1800,
        ),
    )  # fmt: skip
    run_pass(cluster)
    frozen.shift(300 * S)
    assert not synced or sync_cluster(cluster.pk) is not None
    backend = dispatch.backend_for(cluster)
    backend.set_outage(True)
    frozen.shift(2100 * S)
    charge_running_jobs()
    assert sync_cluster(cluster.pk) is None
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    return job, backend


def _drain_its_node(job, cluster, cluster_admin):
    """Allot preempts the job: its node is drained and the pass (the stop it enqueues after
    commit is held back, the backend being down) closes the run now."""
    node = cluster.nodes.get(name=job.nodes[0][0])
    set_node_drain(cluster_admin, node.pk, True, "repair")
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTED


def _charged_to_the_real_end(job):
    job.refresh_from_db()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1800
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 1800
    assert job.last_charged_at == T0 + 1800 * S
    assert [e.reverses_id is not None for e in _ledger(job)][-1]  # appended, never a delete
    [event] = job.events.filter(kind="charges_settled")
    assert event.at == T0 + 1800 * S and "already ended" in event.message


def _fault_checker_problems(job):
    """What the fault suite's ledger check (tests/faults) finds wrong with this job's runs: it
    must take a run settled to its real end as ending there, not at Allot's stop (it did not,
    and failed on a job whose work ended a second before its owner cancelled it)."""
    from tests.faults.attempts import charged_end, runs_of
    from tests.faults.ledger_check import check_run, net_charges

    factor = GpuType.objects.get(name=job.cluster.gpu_type).cost_factor
    charges, problems = net_charges(_ledger(job), factor)
    for run in runs_of(list(job.events.order_by("at", "pk"))):
        problems += check_run(charges, [run["start"]], charged_end(run), job.gpus, run["funded"])[3]
    return problems


@pytest.mark.parametrize("by", ["reconcile", "the stop task"])
def test_a_job_cancelled_after_its_work_ended_in_an_outage_is_charged_to_its_real_end(
    researcher, cluster, frozen, run_pass, by
):
    job, backend = _ended_in_an_outage(researcher, cluster, frozen, run_pass)
    cancel_job(researcher, job.pk)  # its stop task waits for the backend
    job.refresh_from_db()
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2400  # charged to the cancel
    frozen.shift(120 * S)
    backend.set_outage(False)
    if by == "reconcile":
        assert sync_cluster(cluster.pk).settled == [job.pk]
    else:
        dispatch.stop_on_backend(job.pk, job.attempt_key, cancel=True)
    _charged_to_the_real_end(job)
    assert job.state == Job.State.CANCELLED and job.ended_at == T0 + 1800 * S

    assert _fault_checker_problems(job) == []

    rows = len(_ledger(job))
    assert sync_cluster(cluster.pk).settled == []  # once only, whoever learns it again
    dispatch.stop_on_backend(job.pk, job.attempt_key, cancel=True)
    charge_running_jobs()
    assert len(_ledger(job)) == rows
    assert job.events.filter(kind="charges_settled").count() == 1


@pytest.mark.parametrize("by", ["reconcile", "the stop task"])
def test_a_job_preempted_after_its_work_ended_in_an_outage_is_charged_to_its_real_end(
    researcher, cluster_admin, cluster, frozen, run_pass, by
):
    job, backend = _ended_in_an_outage(researcher, cluster, frozen, run_pass)
    _drain_its_node(job, cluster, cluster_admin)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2400  # charged to the preemption
    frozen.shift(120 * S)
    backend.set_outage(False)
    key = job.attempt_key
    if by == "reconcile":
        report = sync_cluster(cluster.pk)
        assert (report.settled, report.stopped) == ([job.pk], [job.pk])
    else:
        dispatch.stop_on_backend(job.pk, key)
    _charged_to_the_real_end(job)
    # its work was done: it ends completed there, and is not requeued to run again
    assert (job.state, job.ended_at, job.exit_code) == (Job.State.COMPLETED, T0 + 1800 * S, 0)
    assert job.run_seconds_done == 1800  # its progress counts to the real end, not the stop
    assert _fault_checker_problems(job) == []
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.COMPLETED and job.attempt == 1

    rows = len(_ledger(job))
    assert sync_cluster(cluster.pk).settled == []
    dispatch.stop_on_backend(job.pk, key)  # a redelivered stop
    assert len(_ledger(job)) == rows
    assert job.events.filter(kind="charges_settled").count() == 1


@pytest.mark.parametrize("by", ["reconcile", "the stop task"])
def test_a_job_preempted_in_an_outage_that_the_backend_forgot_is_settled_to_its_last_sync(
    researcher, cluster_admin, cluster, frozen, run_pass, by
):
    """The job's work ends at 1800 s during an outage; Allot preempts it at 2400 s, still
    unable to ask, and closes it there. When the backend answers, more than an hour after the
    end, it has forgotten the attempt, so no real end settles it: as for a running attempt it
    lost, its charges and its progress count to the last sync that saw it running (300 s),
    not to Allot's stop, before it is requeued (found by the live-loop state machine: the
    restart of a resumable job ran 1 s)."""
    job, backend = _ended_in_an_outage(researcher, cluster, frozen, run_pass)
    _drain_its_node(job, cluster, cluster_admin)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2400  # charged to the preemption
    assert job.run_seconds_done == 2400
    frozen.shift(3100 * S)  # 5500 s: an hour past its end, the backend forgets it
    backend.set_outage(False)
    key = job.attempt_key
    if by == "reconcile":
        assert sync_cluster(cluster.pk).stopped == [job.pk]
    else:
        dispatch.stop_on_backend(job.pk, key)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (Job.State.PENDING, 1)  # requeued to finish its work
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 300
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 300
    assert job.last_charged_at == job.ended_at == T0 + 300 * S
    assert job.run_seconds_done == 300
    assert _ledger(job)[-1].reverses_id is not None  # appended, never a delete
    [event] = job.events.filter(kind="charges_settled")
    assert event.at == T0 + 300 * S and "no longer knows" in event.message
    assert dispatch.launch_spec(job).sim_duration_s == 1500  # the restart runs what is left
    assert _fault_checker_problems(job) == []

    rows = len(_ledger(job))
    sync_cluster(cluster.pk)
    dispatch.stop_on_backend(job.pk, key)  # a redelivered stop: settled once only
    job.refresh_from_db()
    assert len(_ledger(job)) == rows and job.run_seconds_done == 300


def test_a_job_preempted_that_a_cluster_never_synced_forgot_keeps_no_progress(
    researcher, cluster_admin, cluster, frozen, run_pass
):
    """No sync ever confirmed the attempt running: as for one lost there, its charges stay
    provisional to Allot's stop, and a resumable job keeps none of its progress."""
    job, backend = _ended_in_an_outage(researcher, cluster, frozen, run_pass, synced=False)
    _drain_its_node(job, cluster, cluster_admin)
    charged = sum(e.gpu_seconds for e in _ledger(job))
    assert charged == 2 * 2400 and job.run_seconds_done == 2400
    frozen.shift(3100 * S)
    backend.set_outage(False)
    dispatch.stop_on_backend(job.pk, job.attempt_key)
    job.refresh_from_db()
    assert (job.state, job.run_seconds_done) == (Job.State.PENDING, 0)
    assert sum(e.gpu_seconds for e in _ledger(job)) == charged
    assert not job.events.filter(kind="charges_settled").exists()


@pytest.mark.parametrize("by", ["reconcile", "the stop task"])
def test_a_job_preempted_before_its_dispatch_was_sent_keeps_its_charges_to_the_stop(
    researcher, cluster_admin, cluster, frozen, run_pass, django_capture_on_commit_callbacks, by
):
    """A pass starts the job, its dispatch task is held up (its worker died), and a later pass
    preempts it before the dispatch is sent: the backend never had the attempt. It did not
    forget it, so nothing is settled to the last sync (which came before this start: the
    whole run was given back, found by the fault suite): the GPUs were held for it from the
    pass's decision to the stop and it is charged for them, as any run; a resumable job keeps
    no progress, none having been made. The dispatch that arrives late sends nothing."""
    assert sync_cluster(cluster.pk) is not None  # the last sync: before the start
    job = submit_job(
        researcher,
        JobRequest(
            name="t", project="nlp/olmo", cluster="jupiter", gpus=2,
            min_runtime_s=600, sim_duration_s=1800, resumable=True,
        ),
    )  # fmt: skip
    frozen.shift(10 * S)
    with django_capture_on_commit_callbacks(execute=False) as held:
        passes.run_pass(cluster.pk)  # its dispatch is held back
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and not job.dispatched
    started, key = job.started_at, job.attempt_key
    frozen.shift(700 * S)
    node = cluster.nodes.get(name=job.nodes[0][0])
    set_node_drain(cluster_admin, node.pk, True, "repair")
    if by == "reconcile":
        passes.run_pass(cluster.pk)  # its stop task is held back too
        for late_dispatch in held:
            late_dispatch()
        assert sync_cluster(cluster.pk).stopped == [job.pk]
    else:
        run_pass(cluster)  # preempts it; its stop task runs after commit
        for late_dispatch in held:
            late_dispatch()
    job.refresh_from_db()
    assert (job.state, job.attempt, job.dispatched) == (Job.State.PENDING, 1, False)
    assert dispatch.backend_for(cluster).sync() == []  # never launched
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 700
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 700
    assert all(e.reverses_id is None for e in _ledger(job))
    assert started + 700 * S == job.last_charged_at
    assert job.run_seconds_done == 0
    assert not job.events.filter(kind="charges_settled").exists()
    assert key == job.attempt_key
    assert _fault_checker_problems(job) == []


def test_a_job_cancelled_while_still_completing_is_charged_to_its_real_end(
    researcher, cluster, frozen, run_pass, completing
):
    """No outage: Slurm reports the job running (COMPLETING) after its work ended, so the
    cancel is charged past the end and the stop finds nothing to stop; the backend reports
    the real end later, and reconcile gives the difference back."""
    job = _submit(researcher)
    run_pass(cluster)
    frozen.shift(2100 * S)
    assert sync_cluster(cluster.pk).finished == []  # ended at 1800 s, still reported running
    cancel_job(researcher, job.pk)
    dispatch.stop_on_backend(job.pk, job.attempt_key, cancel=True)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2100  # nothing known yet
    frozen.shift(600 * S)
    assert sync_cluster(cluster.pk).settled == [job.pk]
    _charged_to_the_real_end(job)
    assert sync_cluster(cluster.pk).settled == []


def _completing_when_drained(researcher, cluster_admin, cluster, frozen, run_pass, resumable=False):
    """A 2-GPU job (protected 600 s) whose work ended at 1800 s, still reported running
    (COMPLETING) and charged to 2100 s when its node is drained; the pass that preempts it
    is the caller's."""
    job = _submit(researcher, duration_s=1800, min_runtime_s=600, resumable=resumable)
    run_pass(cluster)
    frozen.shift(2100 * S)
    assert sync_cluster(cluster.pk).finished == []
    charge_running_jobs()
    job.refresh_from_db()
    node = cluster.nodes.get(name=job.nodes[0][0])
    set_node_drain(cluster_admin, node.pk, True, "repair")
    return job, node


def test_an_earlier_attempt_restarted_before_its_real_end_was_heard_is_charged_to_that_end(
    researcher, cluster_admin, cluster, frozen, run_pass, completing
):
    """Slurm shows the job COMPLETING when Allot preempts it, so the stop task settles
    nothing and requeues it; a pass restarts it (a new attempt, a new key) before the backend
    reports the first attempt's real end. When it does, that attempt's charges beyond its end
    go back, bounded at the new attempt's start: the new attempt's charges and lien are its
    own."""
    job, node = _completing_when_drained(researcher, cluster_admin, cluster, frozen, run_pass)
    first_key = job.attempt_key
    run_pass(cluster)  # preempted (past its protection); the stop task runs after commit
    job.refresh_from_db()
    assert job.state == Job.State.PENDING  # the stop found it "running" and requeued it
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2100  # charged to the preemption

    frozen.shift(60 * S)
    run_pass(cluster)  # restarted on the other node at 2160 s
    job.refresh_from_db()
    assert (job.state, job.attempt) == (Job.State.RUNNING, 2)
    assert job.attempt_key != first_key
    frozen.shift(60 * S)
    sync_cluster(cluster.pk)  # the first attempt still COMPLETING, with no end time
    charge_running_jobs()  # the new attempt: [2160, 2220)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 2100 + 2 * 60

    frozen.shift(300 * S)  # past the lag: the first attempt reports its end at 1800 s
    report = sync_cluster(cluster.pk)
    assert report.settled == [job.pk]
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1800 + 2 * 60
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 1800 + 2 * 60
    reversal = _ledger(job)[-1]
    assert reversal.reverses_id is not None  # appended, never a delete
    assert reversal.interval_end <= T0 + 2100 * S  # the new attempt's charges untouched
    [event] = job.events.filter(kind="charges_settled")
    assert event.at == T0 + 1800 * S and "attempt 1" in event.message
    job.refresh_from_db()  # the current attempt is left as it is
    assert (job.state, job.started_at) == (Job.State.RUNNING, T0 + 2160 * S)
    assert job.last_charged_at == T0 + 2220 * S and job.ended_at is None
    lien = Lien.objects.get(job_ref=job.pk, released_at__isnull=True)
    assert lien.charged_gpu_seconds == 2 * 60  # the new attempt's lien is not given the refund

    rows = len(_ledger(job))
    assert sync_cluster(cluster.pk).settled == []  # once only
    dispatch.stop_on_backend(job.pk, first_key)  # a redelivered stop of the first attempt
    assert len(_ledger(job)) == rows
    assert job.events.filter(kind="charges_settled").count() == 1


@pytest.mark.parametrize("resumable", [True, False])
def test_a_job_preempted_while_still_completing_ends_there_instead_of_running_again(
    researcher, cluster_admin, cluster, frozen, run_pass, completing, resumable
):
    """Slurm shows the job COMPLETING when Allot preempts it: the stop task finds it
    "running" and requeues it. When reconcile hears that its work had finished at 1800 s,
    before a pass restarted it, the job ends completed there: charged to its real end, its
    progress counted to it, and no pass runs it again."""
    job, node = _completing_when_drained(
        researcher, cluster_admin, cluster, frozen, run_pass, resumable=resumable
    )
    passes.run_pass(cluster.pk)  # preempted; the stop task found it running and requeued it
    dispatch.stop_on_backend(job.pk, job.attempt_key)
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.run_seconds_done == (2100 if resumable else 0)

    frozen.shift(600 * S)  # past the lag, before any pass: the backend reports the real end
    assert sync_cluster(cluster.pk).settled == [job.pk]
    _charged_to_the_real_end(job)
    assert (job.state, job.ended_at, job.exit_code) == (Job.State.COMPLETED, T0 + 1800 * S, 0)
    assert job.run_seconds_done == (1800 if resumable else 0)
    assert "not run again" in job.events.get(kind=Job.State.COMPLETED).message
    set_node_drain(cluster_admin, node.pk, False, "")
    passes.run_pass(cluster.pk)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (Job.State.COMPLETED, 1)
    assert Lien.objects.filter(job_ref=job.pk, released_at__isnull=True).count() == 0


@pytest.mark.parametrize("stop_task", [False, True])
@pytest.mark.parametrize("resumable", [False, True])
def test_a_job_sent_late_and_preempted_while_completing_is_charged_from_its_real_start(
    researcher, cluster_admin, cluster, frozen, completing, resumable, stop_task
):
    """The pass decided the start at T0 while the backend was down; the retried dispatch task
    sent it ten minutes later and no sync has reported that start since. Its 30 minutes of
    work end at 2400 s, Slurm still shows it COMPLETING, and Allot preempts it at 2700 s,
    charged from the decided start. When reconcile hears the real end, before any pass, the
    job ends completed and is charged for what really ran: 600 s to 2400 s, not 5 minutes of
    work counted as 40 (found by the live-loop state machine)."""
    job = _submit(researcher, duration_s=1800, min_runtime_s=600, resumable=resumable)
    backend = dispatch.backend_for(cluster)
    backend.set_outage(True)
    passes.run_pass(cluster.pk)  # decided at T0; its dispatch task waits for the backend
    job.refresh_from_db()
    frozen.shift(600 * S)
    backend.set_outage(False)
    assert dispatch.start_on_backend(job.pk, job.attempt_key)  # really starts at 600 s
    frozen.shift(2100 * S)
    node = cluster.nodes.get(name=job.nodes[0][0])
    set_node_drain(cluster_admin, node.pk, True, "repair")
    passes.run_pass(cluster.pk)  # preempted at 2700 s, charged from T0
    job.refresh_from_db()
    assert (job.state, job.started_at) == (Job.State.PREEMPTED, T0)
    if stop_task:  # it finds the job "running" (COMPLETING) and requeues it
        dispatch.stop_on_backend(job.pk, job.attempt_key)
        job.refresh_from_db()
        assert job.state == Job.State.PENDING

    frozen.shift(600 * S)  # past the lag: the backend reports the real start and end
    assert sync_cluster(cluster.pk).settled == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.started_at, job.ended_at) == (
        Job.State.COMPLETED,
        T0 + 600 * S,
        T0 + 2400 * S,
    )
    assert job.run_seconds_done == (1800 if resumable else 0)
    price = GpuType.objects.get(name=node.gpu_type).cost_factor
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1800
    assert sum(e.cost_gpu_seconds for e in _ledger(job)) == 2 * 1800 * price
    assert Lien.objects.filter(job_ref=job.pk, released_at__isnull=True).count() == 0


@pytest.mark.parametrize("heard_by", ["the stop task", "a redelivered stop"])
def test_a_job_sent_late_and_cancelled_before_any_sync_is_charged_from_its_real_start(
    researcher, cluster, frozen, heard_by
):
    """The pass decided the start at T0 while the backend was down; the retried dispatch task
    sent it ten minutes later, and the owner cancels it ten minutes after that, before any
    sync has reported the real start. The cancel charges from the decided start; the stop
    task, asking the backend, hears the real start and gives back what lies before it: the
    owner pays for ten minutes, not twenty. Once only."""
    job = _submit(researcher, duration_s=7200)
    backend = dispatch.backend_for(cluster)
    backend.set_outage(True)
    passes.run_pass(cluster.pk)  # decided at T0; its dispatch task waits for the backend
    frozen.shift(600 * S)
    backend.set_outage(False)
    job.refresh_from_db()
    assert dispatch.start_on_backend(job.pk, job.attempt_key)  # really starts at 600 s
    frozen.shift(600 * S)
    cancel_job(researcher, job.pk)
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 1200  # from the decided start
    dispatch.stop_on_backend(job.pk, job.attempt_key, cancel=True)
    if heard_by == "a redelivered stop":
        frozen.shift(60 * S)
        dispatch.stop_on_backend(job.pk, job.attempt_key, cancel=True)
    job.refresh_from_db()
    assert (job.state, job.started_at, job.ended_at) == (
        Job.State.CANCELLED,
        T0 + 600 * S,
        T0 + 1200 * S,
    )
    assert sum(e.gpu_seconds for e in _ledger(job)) == 2 * 600
    assert len([e for e in _ledger(job) if e.reverses_id]) >= 1  # appended, never a delete
    assert Lien.objects.filter(job_ref=job.pk, released_at__isnull=True).count() == 0
