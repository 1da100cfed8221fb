"""Fixtures for the exceptions workflow: a priced cluster, a running funded job of the
researcher's (with the lien its start holds), people with email addresses, and a helper that
files a request through the service."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from budgets import ledger
from exceptions import services
from scheduling import liens
from scheduling.models import Cluster, Job, Node
from tests.budgets.factories import GpuTypeFactory


@pytest.fixture(autouse=True)
def _emails(personas):
    for user in personas.values():
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])


@pytest.fixture
def cluster(db):
    GpuTypeFactory(name="H100", cost_factor="1.000")
    found = Cluster.objects.create(name="jupiter", gpu_type="H100")
    for i in range(4):
        Node.objects.create(cluster=found, name=f"jupiter-{i:02d}", gpus=8, gpu_type="H100")
    return found


def running_job(owner, project, cluster, *, hours_ago=1.0, min_runtime_h=8, gpus=8):
    now = timezone.now()
    started = now - dt.timedelta(hours=hours_ago)
    job = Job.objects.create(
        name="deadline run",
        owner=owner,
        project=project,
        cluster=cluster,
        gpus=gpus,
        min_runtime_s=int(min_runtime_h * 3600),
        state=Job.State.RUNNING,
        submitted_at=started - dt.timedelta(minutes=5),
        started_at=started,
        funded=True,
        protected_until=started + dt.timedelta(hours=min_runtime_h),
        nodes=[["jupiter-00", gpus]],
    )
    # What a funded start holds: the lien for its protected window (scheduling.apply).
    cost = liens.protected_window_cost(job, int(min_runtime_h * 3600))
    ledger.hold_lien(project, job.pk, cost, now=started)
    return job


@pytest.fixture
def job(researcher, budget_tree, cluster):
    return running_job(researcher, budget_tree.olmo, cluster)


@pytest.fixture
def protection(researcher, job):
    """The researcher asks for 12 h of protection on their running job."""

    def make(hours=12, who=None):
        return services.request_exception(
            who or researcher,
            "extended_protection",
            job=job.pk,
            hours=hours,
            justification="Camera-ready deadline on Friday.",
        )

    return make


@pytest.fixture
def topup(researcher, budget_tree):
    def make(gpu_hours=500, node=None, who=None):
        return services.request_exception(
            who or researcher,
            "budget_topup",
            node=(node or budget_tree.olmo).pk,
            gpu_hours=Decimal(gpu_hours),
            justification="Ablations for the rebuttal.",
        )

    return make


@pytest.fixture
def reservation(researcher, cluster):
    def make(gpus=16, start_in_h=2, hours=6, who=None):
        start = timezone.now() + dt.timedelta(hours=start_in_h)
        return services.request_exception(
            who or researcher,
            "reservation",
            cluster=cluster.name,
            gpus=gpus,
            start=start,
            end=start + dt.timedelta(hours=hours),
            justification="One big pretraining run.",
        )

    return make
