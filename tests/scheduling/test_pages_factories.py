"""Clusters, nodes and jobs for the page tests (no tests here: fixtures and helpers only).

Jobs are created through ``submit_job`` where the test is about submission, and directly
here where a test needs a queue in a given state quickly; states that a pass would write
(position, reason, funding, protection) are set as a pass writes them.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import GpuType
from scheduling.models import Cluster, Job, JobEvent, Node


def make_cluster(name="jupiter", nodes=2, gpus_per_node=8, state_dir=None, **fields):
    options = {"nodes": nodes, "gpus_per_node": gpus_per_node}
    if state_dir:
        options["state_dir"] = str(state_dir)
    GpuType.objects.get_or_create(name=fields.get("gpu_type", "H100"))
    cluster = Cluster.objects.create(name=name, options=options, **fields)
    for index in range(nodes):
        Node.objects.create(
            cluster=cluster,
            name=f"{name}-{index:02d}",
            gpus=gpus_per_node,
            gpu_type=cluster.gpu_type,
        )
    return cluster


def make_job(owner, cluster, project=None, state="pending", gpus=8, **fields):
    now = timezone.now()
    defaults = dict(
        name=f"job-{owner.username}", min_runtime_s=3600, submitted_at=now - timedelta(minutes=30)
    )
    if state == "pending":
        defaults.update(
            pending_code="Resources",
            pending_message="Waiting for GPUs to free up.",
            queue_position=1,
            estimated_start=now + timedelta(hours=1),
        )
    if state == "running":
        defaults.update(
            started_at=now - timedelta(minutes=10),
            funded=project is not None,
            protected_until=now + timedelta(minutes=50),
            attempt=1,
            nodes=[[f"{cluster.name}-00", gpus]],
        )
    defaults.update(fields)
    job = Job.objects.create(
        owner=owner, cluster=cluster, project=project, state=state, gpus=gpus, **defaults
    )
    JobEvent.objects.create(job=job, at=job.submitted_at, kind="submitted", message="")
    return job


@pytest.fixture(name="cluster")
def cluster_fixture(db):
    return make_cluster()
