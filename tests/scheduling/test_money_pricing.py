"""Price what is used: on a cluster with several GPU types, the lien, the ledger and the
explanation price a job by the nodes it runs on; an unpriced GPU type is never charged."""

import datetime as dt

import pytest
import time_machine
from django.core.management import call_command

from budgets.models import GpuType, Lien, UsageEntry
from scheduling.accounting import charge_running_jobs
from scheduling.explain import explain_job
from scheduling.models import Cluster, Job, Node
from scheduling.services import JobRequest, submit_job
from tests.budgets.factories import GpuTypeFactory
from tests.scheduling.conftest import make_cluster

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def mixed(db, tmp_path):
    """Three H100 nodes (all drained, so nothing lands there) and one B200 node: the cluster's
    most common type is H100."""
    cluster = make_cluster(
        tmp_path, nodes=4, options={"gpu_types": "H100,H100,H100,B200"}, factor="1.000"
    )
    GpuTypeFactory(name="B200", cost_factor="1.800")
    Node.objects.filter(cluster=cluster).exclude(name="jupiter-03").update(
        drained=True, drain_reason="busy elsewhere"
    )
    Node.objects.filter(name="jupiter-03").update(gpu_type="B200")
    return cluster


def test_a_job_on_a_b200_node_of_a_mostly_h100_cluster_is_charged_the_b200_price(
    researcher, mixed, frozen, run_pass
):
    job = submit_job(
        researcher,
        JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=3600),
    )
    run_pass(mixed)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and job.nodes == [["jupiter-03", 8]]
    assert Lien.objects.get(job_ref=job.pk).cost_gpu_seconds == 8 * 3600 * 18 // 10

    frozen.shift(dt.timedelta(hours=1))
    charge_running_jobs()
    entries = UsageEntry.objects.filter(job_ref=job.pk)
    assert sum(e.cost_gpu_seconds for e in entries) == 51_840
    assert {e.gpu_type.name for e in entries} == {"B200"}
    job.refresh_from_db()
    explained = explain_job(job)
    assert explained["gpu_type"] == "B200"
    assert explained["cost_factor"] == pytest.approx(1.8)
    assert explained["gpu_hours_per_hour"] == pytest.approx(14.4)
    assert explained["gpu_hours_so_far"] == pytest.approx(14.4)


@pytest.mark.django_db
def test_discovery_drains_the_nodes_of_an_unpriced_gpu_type_and_says_so(tmp_path, capsys, settings):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    args = ["register_cluster", "mars", "--backend", "simulated", "--option", "nodes=2"]
    args += ["--option", "gpu_type=X9000", "--option", f"state_dir={tmp_path}"]
    call_command(*args)
    err = capsys.readouterr().err
    assert "'X9000' has no cost factor" in err
    assert not GpuType.objects.filter(name="X9000").exists()  # never created at a silent 1.0
    nodes = Node.objects.filter(cluster__name="mars")
    assert all(n.drained and n.drain_reason.startswith("unpriced GPU type") for n in nodes)

    GpuType.objects.create(name="X9000", cost_factor="3.000")  # the operator prices it
    call_command(*args)
    assert "no cost factor" not in capsys.readouterr().err
    assert not any(n.drained for n in Node.objects.filter(cluster__name="mars"))
    assert Cluster.objects.get(name="mars").gpu_type == "X9000"
