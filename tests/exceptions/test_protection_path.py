"""An approved extended protection holds from every start, driven through the live loop:
approved while the job waits, then a drain preempts it after its protection, it is requeued and
restarted, and each start is protected for the approved hours; the exception expires only
after the window it granted. Nobody decides a request about their own job."""

import datetime as dt

import pytest
import time_machine

from budgets.models import GpuType, Lien
from exceptions import services
from exceptions.errors import ExceptionPermissionError
from exceptions.tasks import housekeeping
from scheduling import dispatch, passes
from scheduling.models import Job, Node
from scheduling.services import JobRequest, set_node_drain, submit_job

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def long_job(researcher, cluster, clock):
    GpuType.objects.get_or_create(name="H100")
    return submit_job(
        researcher,
        JobRequest(
            name="long", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=8 * 3600
        ),
    )


def protect(researcher, job, hours=12):
    return services.request_exception(
        researcher, "extended_protection", job=job, hours=str(hours), justification="Long step."
    )


def test_protection_approved_while_pending_holds_from_every_start(
    researcher, cluster_admin, long_job, clock, settings
):
    settings.ALLOT_EXCEPTION_PROTECTION_VALID_H = 10
    request = protect(researcher, long_job)
    services.approve_exception(cluster_admin, request.pk)
    passes.run_pass(long_job.cluster_id)
    long_job.refresh_from_db()
    assert long_job.state == Job.State.RUNNING
    assert long_job.protected_until == T0 + dt.timedelta(hours=12)  # not the 8 h cap
    lien = Lien.objects.get(job_ref=long_job.pk, released_at__isnull=True)
    assert lien.cost_gpu_seconds == 8 * 12 * 3600  # the start's lien holds all 12 h
    assert long_job.protection_source == f"exception #{request.pk}"

    # After its protection a drain preempts it; it is requeued and restarts 13 h after T0.
    clock.shift(dt.timedelta(hours=12, minutes=5))
    node = Node.objects.get(name=long_job.nodes[0][0])
    set_node_drain(cluster_admin, node.pk, True, "fan swap")
    passes.run_pass(long_job.cluster_id)
    long_job.refresh_from_db()
    assert long_job.state == Job.State.PREEMPTED
    dispatch.requeue_preempted(long_job.pk, long_job.attempt_key)
    set_node_drain(cluster_admin, node.pk, False)
    clock.shift(dt.timedelta(minutes=55))
    restart = T0 + dt.timedelta(hours=13)
    passes.run_pass(long_job.cluster_id)
    long_job.refresh_from_db()
    assert long_job.state == Job.State.RUNNING and long_job.attempt == 2
    assert long_job.protected_until == restart + dt.timedelta(hours=12)
    explained = long_job.explanation
    assert explained["protection_source"] == f"exception #{request.pk}"

    request.refresh_from_db()
    assert request.ends_at < restart + dt.timedelta(hours=12)
    clock.move_to(request.ends_at + dt.timedelta(minutes=1))
    assert housekeeping()["expired"] == 0  # past its end, but inside the window it granted
    clock.move_to(restart + dt.timedelta(hours=12, minutes=1))
    assert housekeeping()["expired"] == 1
    long_job.refresh_from_db()
    assert long_job.protection_source == "contract" and long_job.max_protection_s is None


def test_nobody_decides_a_request_about_their_own_job_whoever_filed_it(
    researcher, cluster_admin, cluster, clock
):
    GpuType.objects.get_or_create(name="H100")
    admins_job = submit_job(
        cluster_admin,
        JobRequest(name="mine", project="", cluster="jupiter", gpus=8, min_runtime_s=3600),
    )
    # Filed by a second cluster admin on the first one's job: the owner still cannot decide it.
    from tests.budgets.factories import RoleFactory, UserFactory

    other_admin = UserFactory(username="other_admin")
    RoleFactory(user=other_admin, role="cluster_admin", node=None)
    request = protect(other_admin, admins_job)
    with pytest.raises(ExceptionPermissionError, match="their own job"):
        services.approve_exception(cluster_admin, request.pk)
    with pytest.raises(ExceptionPermissionError, match="their own job"):
        services.reject_exception(cluster_admin, request.pk, reason="no")
