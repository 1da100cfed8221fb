"""End to end on a real slurmctld: a job submitted through the portal's API runs in Slurm on
exactly the nodes the engine chose, as its owner's POSIX account and with none of Allot's
environment, and cancelling it in the portal cancels it in Slurm. The Unix user allot-alice is
made by scripts/identity-up.sh (run by slurm-up.sh)."""

import fcntl
import pwd
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from budgets.models import GpuType
from scheduling import dispatch
from scheduling.backends.base import RemoteState
from scheduling.discovery import register_cluster
from scheduling.identity import set_account
from scheduling.models import Job
from tests.backends.test_slurm_cluster import LOCK, controller_answers
from tests.conftest import service_missing

pytestmark = pytest.mark.slurm


@pytest.fixture
def slurm_cluster(db):
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        if not controller_answers():
            service_missing("no Slurm controller answers `scontrol ping` (run scripts/slurm-up.sh)")
        GpuType.objects.get_or_create(name="H100")  # priced first: unpriced nodes stay drained
        report = register_cluster(
            f"slurm-{uuid.uuid4().hex[:6]}",
            "slurm",
            {"command_timeout": "20", "gpu_type": "H100"},
        )
        yield report.cluster
        backend = dispatch.backend_for(report.cluster)
        for remote in backend.sync():
            if remote.state in (RemoteState.PENDING, RemoteState.RUNNING):
                backend.cancel(remote.job_id, remote.external_id)


def _remote(cluster, attempt_key, timeout=60):
    backend = dispatch.backend_for(cluster)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for remote in backend.sync():
            if remote.attempt_key == attempt_key and remote.state == RemoteState.RUNNING:
                return remote
        time.sleep(1)
    return None


def test_a_portal_job_runs_in_slurm_on_the_nodes_the_engine_chose_as_its_owner(
    client, researcher, slurm_cluster, run_pass, committed, monkeypatch
):
    try:
        pwd.getpwnam("allot-alice")
    except KeyError:
        service_missing("no Unix user allot-alice (run scripts/slurm-up.sh as root)")
    set_account(researcher, "allot-alice")
    for name, value in [
        ("DATABASE_URL", "postgres://allot:hunter2@db/allot"),
        ("REDIS_URL", "redis://broker:6379/0"),
        ("ALLOT_SECRET_KEY", "do-not-leak"),
    ]:
        monkeypatch.setenv(name, value)  # what a worker's environment holds
    shared = Path(tempfile.mkdtemp(prefix="allot-portal-", dir="/tmp"))
    shared.chmod(0o1777)  # the job writes here as allot-alice
    report = shared / "report"
    assert slurm_cluster.nodes.count() >= 2
    assert all(node.gpus == 8 for node in slurm_cluster.nodes.all())
    client.force_login(researcher)
    response = client.post(
        "/api/v1/jobs/",
        {
            "name": "e2e",
            "project": "nlp/olmo",
            "cluster": slurm_cluster.name,
            "gpus": 2,
            "min_runtime_s": 3600,
            "command": f"{{ id -un; env; echo END; }} > {report}; sleep 300",
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])

    run_pass(slurm_cluster)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and job.dispatched
    chosen = tuple(name for name, _ in job.nodes)
    remote = _remote(slurm_cluster, job.attempt_key)
    assert remote is not None, "the job never ran in Slurm"
    assert remote.nodes == chosen
    assert remote.external_id == job.external_id
    deadline = time.monotonic() + 30
    while not (report.exists() and "END" in report.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    lines = report.read_text().splitlines()
    assert lines[0] == "allot-alice"
    names = {line.split("=", 1)[0] for line in lines if "=" in line}
    assert not {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL"} & names
    assert not [n for n in names if n.startswith("ALLOT_") or "SECRET" in n]
    assert "hunter2" not in report.read_text()

    with committed():
        assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    backend = dispatch.backend_for(slurm_cluster)

    def stopped():
        states = {r.attempt_key: r.state for r in backend.sync()}
        return states.get(job.attempt_key) in (RemoteState.CANCELLED, None)

    deadline = time.monotonic() + 30  # scancel is asynchronous: the job passes COMPLETING
    while not stopped() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert stopped()
