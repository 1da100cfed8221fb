"""A Kubernetes job that ends while Allot cannot hear the API server is charged to its real
end (the containers' ``finishedAt``, the Job's ``status.completionTime``), not to when Allot
heard: the live loop on a cluster backed by the fake API server."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.db.models import Sum
from django.utils import timezone

from budgets.models import UsageEntry
from scheduling import discovery, passes, reconcile
from scheduling.accounting import charge_running_jobs
from scheduling.backends.kubernetes_objects import remote_job
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


@pytest.mark.parametrize("outcome", ["complete", "fail"])
def test_a_job_that_ends_during_an_outage_is_charged_to_its_real_end(
    fake_api, researcher, django_capture_on_commit_callbacks, outcome
):
    GpuTypeFactory(name="NVIDIA-H100-80GB-HBM3")
    discovery.register_cluster("k8s-lab", "kubernetes", {"host": fake_api.url, "timeout": "5"})
    set_account(researcher, "researcher", uid=5001, gid=5000)
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
        reconcile.sync_cluster(job.cluster_id)
    with time_machine.travel(t0 + 10 * MIN, tick=False):
        reconcile.sync_cluster(job.cluster_id)
        charge_running_jobs()
    fake_api.outage = "503"
    with time_machine.travel(t0 + 20 * MIN, tick=False):
        if outcome == "complete":
            fake_api.complete_job(job.external_id)
        else:
            fake_api.fail_job(job.external_id, exit_code=3)
    with time_machine.travel(t0 + 40 * MIN, tick=False):
        reconcile.sync_cluster(job.cluster_id)  # the API server does not answer
        charge_running_jobs()
    fake_api.outage = None
    with time_machine.travel(t0 + 70 * MIN, tick=False):
        reconcile.sync_cluster(job.cluster_id)
        charge_running_jobs()
    job.refresh_from_db()
    assert job.state == (Job.State.COMPLETED if outcome == "complete" else Job.State.FAILED)
    assert job.ended_at == t0 + 20 * MIN
    assert charged_gpu_seconds(job) == 8 * 20 * 60


def test_the_end_is_read_from_the_job_when_no_container_reports_one():
    job = {
        "metadata": {"name": "allot-1-a", "labels": {"allot.dev/job-id": "1"}},
        "spec": {"parallelism": 1},
        "status": {
            "completionTime": "2026-12-31T23:30:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    ended = remote_job(job, []).ended_at
    assert ended == dt.datetime(2026, 12, 31, 23, 30, tzinfo=dt.UTC).timestamp()
