"""Where a backend reports when a job really started, protection and charges count
from then. The live loop (submit, pass, dispatch, sync, charge) on a Kubernetes cluster backed
by the fake API server, whose kubelet takes ten minutes to start the pods (an image pull)."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.db.models import Sum
from django.utils import timezone

from budgets.models import UsageEntry
from scheduling import discovery, passes, reconcile
from scheduling.accounting import charge_running_jobs
from scheduling.identity import set_account
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name
from tests.budgets.factories import GpuTypeFactory

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]

MIN = dt.timedelta(minutes=1)


@pytest.fixture(autouse=True)
def eager_tasks(eager_celery):
    """Dispatch runs in-process, right after the pass commits."""


def charged_gpu_seconds(job: Job) -> int:
    entries = UsageEntry.objects.filter(job_ref=job.pk)
    return entries.aggregate(total=Sum("gpu_seconds"))["total"] or 0


def test_protection_and_charges_count_from_when_the_pods_really_started(
    fake_api, researcher, django_capture_on_commit_callbacks
):
    GpuTypeFactory(name="NVIDIA-H100-80GB-HBM3")
    discovery.register_cluster("k8s-lab", "kubernetes", {"host": fake_api.url, "timeout": "5"})
    set_account(researcher, "researcher", uid=5001, gid=5000)
    fake_api.kubelet_paused = True
    t0 = timezone.now().replace(microsecond=0)

    with time_machine.travel(t0, tick=False):
        job = submit_job(
            researcher,
            JobRequest(
                name="train", project="nlp/olmo", cluster="k8s-lab", gpus=8, min_runtime_s=3600
            ),
        )
        with django_capture_on_commit_callbacks(execute=True):
            passes.run_pass(job.cluster_id)
    job.refresh_from_db()
    assert (job.state, job.funded, job.dispatched) == (Job.State.RUNNING, True, True)
    assert job.started_at == t0 and job.protected_until == t0 + 60 * MIN

    with time_machine.travel(t0 + 5 * MIN, tick=False):
        reconcile.sync_cluster(job.cluster_id)  # bound, not started: nothing to confirm yet
        charge_running_jobs()
    job.refresh_from_db()
    assert job.started_at == t0
    assert charged_gpu_seconds(job) == 8 * 5 * 60  # provisional, from the pass's decision

    with time_machine.travel(t0 + 10 * MIN, tick=False):
        fake_api.start_pods(job.external_id)  # the kubelet's startTime: t0 + 10 min
        reconcile.sync_cluster(job.cluster_id)
    job.refresh_from_db()
    assert job.started_at == t0 + 10 * MIN
    assert job.protected_until == t0 + 70 * MIN  # the hour of protection counts from the start
    assert charged_gpu_seconds(job) == 0  # the ten minutes before it are given back

    with time_machine.travel(t0 + 30 * MIN, tick=False):
        reconcile.sync_cluster(job.cluster_id)
        charge_running_jobs()
    assert charged_gpu_seconds(job) == 8 * 20 * 60


def test_a_job_cancelled_before_its_pods_started_keeps_no_charge(
    fake_api, researcher, django_capture_on_commit_callbacks
):
    from budgets.balances import remaining_by_path
    from scheduling.services import cancel_job

    GpuTypeFactory(name="NVIDIA-H100-80GB-HBM3")
    discovery.register_cluster("k8s-lab", "kubernetes", {"host": fake_api.url, "timeout": "5"})
    set_account(researcher, "researcher", uid=5001, gid=5000)
    fake_api.kubelet_paused = True
    t0 = timezone.now().replace(microsecond=0)
    with time_machine.travel(t0, tick=False):
        job = submit_job(
            researcher,
            JobRequest(
                name="train", project="nlp/olmo", cluster="k8s-lab", gpus=8, min_runtime_s=3600
            ),
        )
        with django_capture_on_commit_callbacks(execute=True):
            passes.run_pass(job.cluster_id)
        before = remaining_by_path()
    with time_machine.travel(t0 + 5 * MIN, tick=False):
        reconcile.sync_cluster(job.cluster_id)  # bound, not started
        charge_running_jobs()
    assert charged_gpu_seconds(job) == 8 * 5 * 60  # provisional, from the pass's decision
    with time_machine.travel(t0 + 10 * MIN - dt.timedelta(seconds=1), tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            cancel_job(researcher, job.pk)  # a second before the kubelet would start the pods
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert charged_gpu_seconds(job) == 0  # charged from the backend's start: there was none
    assert job.events.filter(kind="charges_settled").exists()
    assert remaining_by_path()[job.project.path] == before[job.project.path] + 8 * 3600
