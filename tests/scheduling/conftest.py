"""Clusters for scheduling tests: a small simulated cluster whose state lives in tmp_path."""

import pytest

from scheduling.models import Cluster, Node
from tests.budgets.factories import GpuTypeFactory


@pytest.fixture(autouse=True)
def eager_tasks(eager_celery):
    """Dispatch tasks run in-process unless a test starts a real worker."""


def make_cluster(
    tmp_path,
    name="jupiter",
    nodes=2,
    gpus=8,
    gpu_type="H100",
    factor="1.000",
    backend="simulated",
    options=None,
):
    GpuTypeFactory(name=gpu_type, cost_factor=factor)
    opts = {
        "nodes": str(nodes),
        "gpus_per_node": str(gpus),
        "gpu_type": gpu_type,
        "state_dir": str(tmp_path / "sim"),
        "speed": "1",
    }
    opts.update(options or {})
    cluster = Cluster.objects.create(
        name=name, backend=backend, options=opts, gpu_type=gpu_type, interactive_pool_gpus=8
    )
    for index in range(nodes):
        Node.objects.create(
            cluster=cluster, name=f"{name}-{index:02d}", gpus=gpus, gpu_type=gpu_type
        )
    return cluster


@pytest.fixture
def cluster(db, tmp_path):
    return make_cluster(tmp_path)


@pytest.fixture
def run_pass(django_capture_on_commit_callbacks):
    """Run one scheduling pass and its after-commit dispatch, as a worker would."""
    from scheduling import passes

    def run(cluster):
        with django_capture_on_commit_callbacks(execute=True):
            return passes.run_pass(cluster.pk if hasattr(cluster, "pk") else cluster)

    return run


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Context manager: run what a block enqueues after commit (dispatch tasks)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def optimistic(django_capture_on_commit_callbacks):
    """``optimistic(cluster)``: the SQLite pass (snapshot and engine outside the lock), with
    its on-commit dispatch run."""
    from scheduling import passes

    def run(cluster):
        with django_capture_on_commit_callbacks(execute=True):
            return passes.run_pass_optimistic(cluster.pk)

    return run


def submit_many(user, cluster, count, gpus=1, min_runtime_s=3600, sim_duration_s=7200):
    """``count`` funded jobs of ``gpus`` each for nlp/olmo on ``cluster``, in submit order."""
    from scheduling.services import JobRequest, submit_job

    return [
        submit_job(
            user,
            JobRequest(
                name=f"t{index}",
                project="nlp/olmo",
                cluster=cluster.name,
                gpus=gpus,
                min_runtime_s=min_runtime_s,
                sim_duration_s=sim_duration_s,
            ),
        )
        for index in range(count)
    ]
