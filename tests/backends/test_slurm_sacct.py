"""Slurm accounting in sync: a job that finished while Allot could not look (and so left squeue
after MinJobAge) is reported by sacct with its end, and reconcile closes it instead of running
it again. The Slurm commands are fed from output captured on the harness with DBD=1
(tests/backends/fixtures/slurm/capture.sh accounting): at that moment squeue showed only the
running job 201 while sacct still had the others."""

import copy
import datetime as dt
import json
from pathlib import Path

import pytest
import time_machine

from scheduling import dispatch, reconcile
from scheduling.backends.base import BackendError, BackendUnavailable, RemoteJob, RemoteState
from scheduling.backends.command import CommandResult
from scheduling.backends.slurm import SlurmBackend, merge_accounting
from scheduling.identity import set_account
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.scheduling.conftest import make_cluster

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
ENDED_202 = 1795957277  # time.end of job 202 in sacct.json


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class FakeRunner:
    """Answers like CommandRunner: a refusal raises BackendError when ``check`` is on; an
    exception in ``answers`` stands for a client that did not answer."""

    def __init__(self, **answers):
        self.answers = {
            "squeue": fixture("squeue_after_min_job_age.json"),
            "sacct --json": fixture("sacct.json"),
            "sacct text": fixture("sacct_exit_codes.txt"),
            "scancel": "",  # reconcile cancels job 201: it runs for no live Allot attempt
            **answers,
        }
        self.calls: list[tuple[str, ...]] = []

    def run(self, args, *, check=True, timeout_s=None, input=None):
        self.calls.append(tuple(args))
        key = (
            args[0]
            if args[0] != "sacct"
            else ("sacct --json" if "--json" in args else "sacct text")
        )
        answer = self.answers[key]
        if isinstance(answer, Exception):
            raise answer
        code, out, err = answer if isinstance(answer, tuple) else (0, answer, "")
        if check and code:
            raise BackendError(f"slurm: {args[0]} failed: {err.strip()}")
        return CommandResult(tuple(args), code, out, err, 0.01)

    def count(self, command: str) -> int:
        return sum(1 for call in self.calls if call[0] == command)


def backend(accounting: str = "auto", **answers) -> SlurmBackend:
    slurm = SlurmBackend("allot-test", {"accounting": accounting})
    slurm.runner = FakeRunner(**answers)
    return slurm


DISABLED = (1, "", fixture("sacct_disabled.txt"))  # real: sacct exits 1 and says so


def test_a_job_gone_from_squeue_but_completed_in_sacct_is_reported_completed_with_its_end():
    jobs = {job.attempt_key: job for job in backend().sync()}
    assert jobs["201-1"].state is RemoteState.RUNNING  # squeue's own job
    assert jobs["202:1"].state is RemoteState.COMPLETED
    assert jobs["202:1"].ended_at == ENDED_202
    assert jobs["202:1"].exit_code == 0
    assert jobs["202:1"].external_id == "2"


def test_failed_cancelled_and_preempted_attempts_come_back_with_their_own_states():
    slurm = backend()
    jobs = {job.attempt_key: job for job in slurm.sync()}
    assert (jobs["203-1"].state, jobs["203-1"].exit_code) == (RemoteState.FAILED, 3)
    assert jobs["204-1"].state is RemoteState.CANCELLED
    assert jobs["205-1"].state is RemoteState.PREEMPTED  # Allot's preempted=1 mark survives
    assert "206-1" not in jobs  # tagged for another Allot cluster
    # 22.05's JSON loses exit 3; one text query asks for the failed jobs only sacct knows.
    (text_query,) = [c for c in slurm.runner.calls if c[0] == "sacct" and "--json" not in c]
    assert text_query[-1] == "--jobs=1,3"


def test_sacct_reads_only_the_configured_window():
    slurm = SlurmBackend("allot-test", {"sacct_window_h": "6"})
    slurm.runner = FakeRunner()
    slurm.sync()
    json_query = next(c for c in slurm.runner.calls if "--json" in c and c[0] == "sacct")
    assert "--starttime=now-6hours" in json_query and "--endtime=now" in json_query


def test_squeue_wins_for_an_attempt_both_know():
    live = RemoteJob(202, "2", "202:1", RemoteState.RUNNING, ("node1",))
    old = RemoteJob(202, "2", "202:1", RemoteState.COMPLETED, ("node1",), 0, None, ENDED_202)
    assert merge_accounting([live], [old]) == [live]


def test_a_job_sacct_calls_running_but_squeue_lost_is_not_reported():
    ghost = RemoteJob(9, "9", "9-1", RemoteState.RUNNING, ("node1",))
    assert merge_accounting([], [ghost]) == []


def test_of_two_slurm_jobs_for_one_attempt_the_lowest_id_wins_as_in_submit():
    kept = RemoteJob(9, "11", "9-1", RemoteState.COMPLETED, ended_at=1.0)
    duplicate = RemoteJob(9, "12", "9-1", RemoteState.CANCELLED, ended_at=2.0)
    assert merge_accounting([], [duplicate, kept]) == [kept]


def test_accounting_none_never_calls_sacct():
    slurm = backend("none")
    jobs = slurm.sync()
    assert slurm.runner.count("sacct") == 0
    assert [job.attempt_key for job in jobs] == ["201-1"]


def test_auto_asks_sacct_once_and_stops_when_accounting_is_disabled():
    slurm = backend("auto", **{"sacct --json": DISABLED})
    for _ in range(3):
        assert [job.attempt_key for job in slurm.sync()] == ["201-1"]
    assert slurm.runner.count("sacct") == 1
    assert slurm.runner.count("squeue") == 3
    assert slurm.accounting is False
    assert "accounting storage is disabled" in slurm.accounting_note


def test_auto_without_a_sacct_binary_turns_accounting_off():
    missing = BackendUnavailable("slurm[allot-test]: command not found: sacct")
    slurm = backend("auto", **{"sacct --json": missing})
    slurm.sync()
    slurm.sync()
    assert slurm.runner.count("sacct") == 1


def test_explicit_sacct_mode_reports_a_refusal_instead_of_hiding_it():
    with pytest.raises(BackendError, match="accounting storage is disabled"):
        backend("sacct", **{"sacct --json": DISABLED}).sync()


def test_once_accounting_works_a_silent_slurmdbd_makes_the_whole_sync_unavailable():
    slurm = backend("auto")
    slurm.sync()
    down = BackendUnavailable("sacct: error: Connection refused")
    slurm.runner.answers["sacct --json"] = down
    with pytest.raises(BackendUnavailable):
        slurm.sync()  # a partial answer would requeue jobs that completed


def test_an_unknown_accounting_mode_is_refused():
    with pytest.raises(BackendError, match="accounting must be"):
        SlurmBackend("c", {"accounting": "sometimes"})


# --- reconcile ---------------------------------------------------------------------------------


def _running_attempt(researcher, tmp_path, accounting):
    """Allot's view: attempt 202:1 was dispatched to Slurm job 2 and runs, as it did before an
    outage longer than MinJobAge. The rows are built directly (no engine pass)."""
    cluster = make_cluster(
        tmp_path, name="allot-test", backend="slurm", options={"accounting": accounting}
    )
    set_account(researcher, "researcher")  # jobs on Slurm run as their owner's account
    job = submit_job(
        researcher,
        JobRequest(name="t", project="nlp/olmo", cluster="allot-test", gpus=1, min_runtime_s=60),
    )
    started = dt.datetime.fromtimestamp(ENDED_202 - 600, tz=dt.UTC)
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.RUNNING,
        attempt_key="202:1",
        dispatched=True,
        external_id="2",
        nodes=[["allot-test-00", 1]],
        started_at=started,
        first_started_at=started,
    )
    return cluster, job


@pytest.fixture
def slurm_backend(monkeypatch):
    """Every backend_for returns one SlurmBackend fed from the captured output."""
    holder = {}

    def backend_for(cluster):
        if "backend" not in holder:
            holder["backend"] = backend(cluster.options.get("accounting", "auto"))
        return holder["backend"]

    monkeypatch.setattr(dispatch, "backend_for", backend_for)
    monkeypatch.setattr(reconcile, "backend_for", backend_for)  # imported by name there
    return holder


@pytest.mark.django_db
def test_reconcile_closes_an_attempt_only_sacct_knows_as_completed(
    researcher, tmp_path, slurm_backend
):
    cluster, job = _running_attempt(researcher, tmp_path, "auto")
    with time_machine.travel(dt.datetime.fromtimestamp(ENDED_202 + 3600, tz=dt.UTC), tick=False):
        report = reconcile.sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert report.finished == [job.pk] and report.lost == []
    assert job.state == Job.State.COMPLETED
    assert job.exit_code == 0
    assert job.ended_at == dt.datetime.fromtimestamp(ENDED_202, tz=dt.UTC)  # not an hour later


@pytest.mark.django_db
def test_without_accounting_the_same_attempt_is_taken_for_lost_and_requeued(
    researcher, tmp_path, slurm_backend
):
    cluster, job = _running_attempt(researcher, tmp_path, "none")
    with time_machine.travel(dt.datetime.fromtimestamp(ENDED_202 + 3600, tz=dt.UTC), tick=False):
        report = reconcile.sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert report.lost == [job.pk]
    assert job.state == Job.State.PENDING


def test_a_retried_submit_of_an_attempt_only_sacct_remembers_launches_nothing():
    from scheduling.backends.base import LaunchSpec

    slurm = backend()
    spec = LaunchSpec(
        job_id=202,
        attempt_key="202:1",
        name="t",
        user="u",
        project="p",
        gpus=1,
        nodes=("node1",),
        gpus_per_node=1,
        command="true",
    )
    remote = slurm.submit(spec)
    assert (remote.external_id, remote.state) == ("2", RemoteState.COMPLETED)
    assert slurm.runner.count("sbatch") == 0


# --- a concurrent retry's duplicate ------------------------------------------------------------


def _squeue_with_a_cancelled_duplicate() -> str:
    """squeue as the fault suite saw it: two workers dispatched attempt 201-1 at once (the pass's
    dispatch and reconcile's), both sbatch'ed, and ``submit`` kept the lowest id (1) and
    cancelled the other (7), which squeue lists after it."""
    data = json.loads(fixture("squeue_after_min_job_age.json"))
    duplicate = copy.deepcopy(data["jobs"][0])
    duplicate.update(job_id=7, job_state="CANCELLED", end_time=duplicate["start_time"] + 1)
    data["jobs"].append(duplicate)
    return json.dumps(data)


def test_sync_reports_the_slurm_job_submit_kept_not_its_cancelled_duplicate():
    slurm = backend("none", squeue=_squeue_with_a_cancelled_duplicate())
    (job,) = slurm.sync()
    assert (job.attempt_key, job.external_id, job.state) == ("201-1", "1", RemoteState.RUNNING)


@pytest.mark.django_db
def test_reconcile_leaves_a_running_attempt_alone_when_its_duplicate_was_cancelled(
    researcher, tmp_path, monkeypatch
):
    cluster, job = _running_attempt(researcher, tmp_path, "none")
    Job.objects.filter(pk=job.pk).update(attempt_key="201-1", external_id="1")
    slurm = backend("none", squeue=_squeue_with_a_cancelled_duplicate())
    monkeypatch.setattr(reconcile, "backend_for", lambda cluster: slurm)
    report = reconcile.sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert report.lost == [] and report.orphans == []
    assert job.state == Job.State.RUNNING  # not "stopped outside Allot" and requeued
