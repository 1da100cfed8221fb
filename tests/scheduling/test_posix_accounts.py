"""Every job on a real cluster runs as its owner's POSIX account: setting one (command, admin),
and refusing submissions to Slurm and Kubernetes clusters from users without one."""

import pytest
from django.core.management import CommandError, call_command

from scheduling import dispatch
from scheduling.backends.base import BackendError
from scheduling.models import Job, PosixAccount
from tests.scheduling.conftest import make_cluster

JOB = {"name": "x", "project": "nlp/olmo", "gpus": 1, "min_runtime_s": 3600}


def submit(client, user, cluster):
    client.force_login(user)
    return client.post(
        "/api/v1/jobs/", {**JOB, "cluster": cluster.name}, content_type="application/json"
    )


def test_the_command_sets_changes_and_clears_a_users_account(researcher, capsys):
    call_command("posix_account", "researcher", "rsearch")
    assert PosixAccount.objects.get(user=researcher).name == "rsearch"
    call_command("posix_account", "researcher", "rsearch2", "--uid", "5001", "--gid", "5000")
    account = PosixAccount.objects.get(user=researcher)
    assert (account.name, account.uid, account.gid) == ("rsearch2", 5001, 5000)
    call_command("posix_account", "researcher", "--clear")
    assert not PosixAccount.objects.filter(user=researcher).exists()
    assert "removed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["root"],
        ["Bad Name"],
        ["x" * 40],
        ["ok", "--uid", "0", "--gid", "0"],
        ["ok", "--uid", "5001"],
        [],
    ],
)
def test_the_command_refuses_root_and_malformed_accounts(researcher, args):
    with pytest.raises(CommandError):
        call_command("posix_account", "researcher", *args)
    assert not PosixAccount.objects.exists()


def test_two_users_cannot_share_an_account(researcher, outsider):
    call_command("posix_account", "researcher", "shared")
    with pytest.raises(CommandError, match="name"):
        call_command("posix_account", "outsider", "shared")


@pytest.mark.parametrize("backend", ["slurm", "kubernetes"])
def test_without_an_account_a_real_cluster_refuses_the_job_naming_cluster(
    client, researcher, tmp_path, backend
):
    cluster = make_cluster(tmp_path, name="real", backend=backend)
    response = submit(client, researcher, cluster)
    assert response.status_code == 400
    assert response.json()["field"] == "cluster"
    assert "POSIX account" in str(response.json())
    assert Job.objects.count() == 0


def test_the_form_refuses_it_too_naming_cluster(client, researcher, tmp_path):
    cluster = make_cluster(tmp_path, name="real", backend="slurm")
    client.force_login(researcher)
    form = {**JOB, "cluster": cluster.name, "min_runtime_hours": "1", "kind": "batch"}
    response = client.post("/jobs/", form)
    assert Job.objects.count() == 0
    assert b"POSIX account" in response.content


def test_a_simulated_cluster_needs_no_account(client, researcher, cluster):
    assert submit(client, researcher, cluster).status_code == 201


def test_with_an_account_slurm_accepts_the_job_and_kubernetes_also_needs_ids(
    client, researcher, tmp_path
):
    slurm = make_cluster(tmp_path, name="slurmy", backend="slurm")
    kube = make_cluster(tmp_path, name="kube", backend="kubernetes", gpu_type="A100")
    call_command("posix_account", "researcher", "rsearch")
    assert submit(client, researcher, slurm).status_code == 201
    refused = submit(client, researcher, kube)
    assert refused.status_code == 400 and refused.json()["field"] == "cluster"
    call_command("posix_account", "researcher", "rsearch", "--uid", "5001", "--gid", "5000")
    assert submit(client, researcher, kube).status_code == 201


def test_the_launch_spec_carries_the_owners_account(client, researcher, tmp_path):
    cluster = make_cluster(tmp_path, name="kube", backend="kubernetes")
    call_command("posix_account", "researcher", "rsearch", "--uid", "5001", "--gid", "5000")
    job = Job.objects.get(pk=submit(client, researcher, cluster).json()["id"])
    spec = dispatch.launch_spec(job)
    assert (spec.posix_user, spec.uid, spec.gid) == ("rsearch", 5001, 5000)
    # An account removed after submission: the start is refused, not run as someone else.
    call_command("posix_account", "researcher", "--clear")
    with pytest.raises(BackendError, match="POSIX account"):
        dispatch.launch_spec(job)
