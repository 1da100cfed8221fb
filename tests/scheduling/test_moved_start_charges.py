"""A start the backend moves off the pass's whole-second grid is charged exactly from there.

Charges are whole seconds counted from where a run's charging starts. When the backend reports
that the attempt really started later than the pass decided (Slurm queued it; a lost dispatch
was sent again), protection and charges count from that real start. Charges already written
from the pass's start lie on the pass's grid: keeping them and trimming the one the real start
falls into would leave the run up to a second per GPU short for good (found by the fault suite,
tests/faults). So the attempt's charges are given back and charged again from the real start.

The backend here is Slurm's shape: a submitted job waits in the cluster's own queue (reported
pending, no start time) and its start time is reported in whole seconds, truncated.
"""

import dataclasses
import datetime as dt
import math

import pytest
import time_machine

from budgets.models import UsageEntry
from scheduling.accounting import charge_running_jobs
from scheduling.backends import base as backend_base
from scheduling.backends.base import RemoteState
from scheduling.backends.simulated import SimulatedBackend
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
MS = dt.timedelta(milliseconds=1)
S = dt.timedelta(seconds=1)


class QueuedBackend(SimulatedBackend):
    """The simulated backend with Slurm's queue: a job starts `queued_s` after its submission,
    is reported pending until then, and its start and end are reported in whole seconds."""

    queued_s = 0.0

    def submit(self, spec):
        remote = super().submit(spec)
        with self._state() as state:
            record = state["jobs"][spec.attempt_key]
            if "submitted_wall" not in record:
                record["submitted_wall"] = record["started_wall"]
                record["started_wall"] += self.queued_s
        return remote

    def sync(self):
        now = self.clock()
        reported = []
        for remote in super().sync():
            if remote.started_at is not None and now < remote.started_at:
                remote = dataclasses.replace(
                    remote, state=RemoteState.PENDING, nodes=(), started_at=None,
                    gpu_utilization=None,
                )  # fmt: skip
            else:
                remote = dataclasses.replace(
                    remote,
                    started_at=remote.started_at and math.floor(remote.started_at),
                    ended_at=remote.ended_at and math.floor(remote.ended_at),
                )
            reported.append(remote)
        return reported


@pytest.fixture
def queued(monkeypatch):
    monkeypatch.setitem(
        backend_base._REGISTRY, "simulated", f"{QueuedBackend.__module__}.QueuedBackend"
    )
    monkeypatch.setattr(QueuedBackend, "queued_s", 2.1)


def _charged(job) -> int:
    return sum(e.gpu_seconds for e in UsageEntry.objects.filter(job_ref=job.pk))


def test_a_start_moved_off_the_pass_grid_is_charged_to_the_second_from_the_real_start(
    researcher, cluster, run_pass, queued
):
    with time_machine.travel(T0 + 50 * MS, tick=False) as clock:
        job = submit_job(
            researcher,
            JobRequest(
                name="t", project="nlp/olmo", cluster="jupiter", gpus=2,
                min_runtime_s=600, sim_duration_s=90,
            ),
        )  # fmt: skip
        run_pass(cluster)  # decided at 0.05 s; Slurm queues it, to start at 2.15 s (reported 2 s)
        clock.move_to(T0 + 2100 * MS)
        sync_cluster(cluster.pk)  # still pending on the cluster
        charge_running_jobs()  # from the decided start: [0.05 s, 2.05 s), past the real start
        assert _charged(job) == 2 * 2

        clock.move_to(T0 + 62 * S)
        sync_cluster(cluster.pk)  # reports the start: 2 s
        job.refresh_from_db()
        assert job.started_at == T0 + 2 * S
        charge_running_jobs()
        assert _charged(job) == 2 * 60  # [2 s, 62 s), not a second less

        clock.move_to(T0 + 100 * S)
        sync_cluster(cluster.pk)  # its work ended at 92.15 s, reported 92 s
        job.refresh_from_db()
        assert job.state == Job.State.COMPLETED
        assert job.ended_at == T0 + 92 * S
        assert _charged(job) == 2 * 90
        costs = UsageEntry.objects.filter(job_ref=job.pk).values_list("cost_gpu_seconds", flat=True)
        assert sum(costs) == 2 * 90


def test_a_start_moved_by_whole_seconds_is_charged_from_it_to_the_second(
    researcher, cluster, run_pass, queued, monkeypatch
):
    """Decided on a whole second and started on one: the real start lies on the pass's grid,
    so only what was charged before it goes back."""
    monkeypatch.setattr(QueuedBackend, "queued_s", 3.0)
    with time_machine.travel(T0, tick=False) as clock:
        job = submit_job(
            researcher,
            JobRequest(
                name="t", project="nlp/olmo", cluster="jupiter", gpus=1,
                min_runtime_s=600, sim_duration_s=60,
            ),
        )  # fmt: skip
        run_pass(cluster)
        clock.move_to(T0 + 2 * S)
        sync_cluster(cluster.pk)
        charge_running_jobs()
        clock.move_to(T0 + 30 * S)
        sync_cluster(cluster.pk)
        charge_running_jobs()
        assert _charged(job) == 27
        clock.move_to(T0 + 70 * S)
        sync_cluster(cluster.pk)
        job.refresh_from_db()
        assert (job.state, job.started_at, job.ended_at) == (
            Job.State.COMPLETED, T0 + 3 * S, T0 + 63 * S
        )  # fmt: skip
        assert _charged(job) == 60
