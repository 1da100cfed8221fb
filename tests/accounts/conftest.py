import pytest
from django.utils import timezone

from scheduling.models import Cluster, Job, Node


@pytest.fixture
def jupiter(db):
    cluster = Cluster.objects.create(name="jupiter", gpu_type="H100")
    Node.objects.create(cluster=cluster, name="jupiter-00", gpus=8, gpu_type="H100")
    return cluster


@pytest.fixture
def researchers_job(researcher, budget_tree, jupiter):
    return Job.objects.create(
        name="train",
        owner=researcher,
        project=budget_tree.olmo,
        cluster=jupiter,
        gpus=1,
        min_runtime_s=3600,
        command="python train.py --secret-path /home/researcher/data",
        submitted_at=timezone.now(),
    )
