"""A job's lien follows its protection down as well as up: it covers the protected window left.

An approved extended protection grows the running job's lien to cover the extra protected
hours (liens.extend_protection_lien). When the exception ends and the job falls back to
its own contract, the lien must shrink to what that contract still needs: otherwise the
budget stays held for protected hours nobody is promised any more, and the floor counts them
against the project until the run ends. It never shrinks below what is already charged.
"""

import datetime as dt

import pytest
import time_machine

from budgets.balances import held_by_path
from budgets.models import Lien
from exceptions import services as exception_services
from exceptions.models import ExceptionRequest
from exceptions.tasks import housekeeping
from scheduling import dispatch
from scheduling.accounting import charge_running_jobs
from scheduling.models import Job
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def _open_lien(job):
    return Lien.objects.get(job_ref=job.pk, released_at__isnull=True)


def test_an_expired_protection_shrinks_the_lien_to_what_the_contract_still_needs(
    researcher, cluster_admin, cluster, frozen, run_pass, settings
):
    settings.ALLOT_EXCEPTION_PROTECTION_VALID_H = 12
    job = submit_job(
        researcher,
        JobRequest(
            name="long", project="nlp/olmo", cluster="jupiter", gpus=2, min_runtime_s=3600,
            sim_duration_s=30 * 3600,
        ),
    )  # fmt: skip
    run_pass(cluster)
    frozen.shift(2 * H)
    sync_cluster(cluster.pk)
    charge_running_jobs()
    request = exception_services.request_exception(
        researcher, "extended_protection", job=job, hours="12", justification="long step"
    )
    exception_services.approve_exception(cluster_admin, request.pk)
    job.refresh_from_db()
    assert job.protected_until == T0 + 12 * H
    lien = _open_lien(job)
    assert lien.cost_gpu_seconds - lien.charged_gpu_seconds == 2 * 10 * 3600  # 2 h .. 12 h

    frozen.shift(H)  # charged to 3 h; then the backend stops answering
    sync_cluster(cluster.pk)
    charge_running_jobs()
    dispatch.backend_for(cluster).set_outage(True)
    frozen.shift(11 * H + 60 * dt.timedelta(seconds=1))  # 14 h: the exception's end is past
    assert sync_cluster(cluster.pk) is None
    charge_running_jobs()  # no further than the last sync (3 h)
    housekeeping()
    request.refresh_from_db()
    assert request.state == ExceptionRequest.State.EXPIRED
    job.refresh_from_db()
    assert (job.state, job.protected_until) == (Job.State.RUNNING, T0 + H)  # its contract

    lien = _open_lien(job)  # charged to 3 h, past its contract's hour: nothing left to hold
    assert lien.cost_gpu_seconds == lien.charged_gpu_seconds == 2 * 3 * 3600
    assert held_by_path().get(job.project.path, 0) == 0
    [event] = job.events.filter(kind="protection", message__contains="back to the job")
    assert "lien" in event.message and f"{2 * 9 * 3600}" in event.message.replace(",", "")
