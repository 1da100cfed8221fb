"""A job's POSIX account is never Allot's own (the configured service account, or whoever the
worker runs as), root, or a system account (uid below ALLOT_MIN_JOB_UID): not through the
command, the admin, the SSO claims, the service, nor at the start of a job set up before."""

import pwd

import pytest
from django.core.management import CommandError, call_command

from portal.sso.claims import sync_posix_account
from scheduling import dispatch
from scheduling.backends.base import BackendError
from scheduling.errors import JobValidationError
from scheduling.identity import set_account
from scheduling.models import Job, PosixAccount
from tests.scheduling.conftest import make_cluster

SERVICE = "allot-svc"


@pytest.fixture(autouse=True)
def service_account(settings):
    settings.ALLOT_SERVICE_USER = SERVICE
    settings.ALLOT_MIN_JOB_UID = 1000


def system_name() -> str:
    """A name in this machine's password database with a system uid (not root)."""
    return next(e.pw_name for e in pwd.getpwall() if 0 < e.pw_uid < 1000)


@pytest.mark.parametrize(
    ("name", "uid", "field"),
    [
        (SERVICE, None, "name"),
        (SERVICE, 5001, "name"),
        ("root", None, "name"),
        ("alice", 999, "uid"),
        ("alice", 1, "uid"),
    ],
)
def test_the_service_refuses_an_account_jobs_must_never_run_as(researcher, name, uid, field):
    with pytest.raises(JobValidationError) as caught:
        set_account(researcher, name, uid, None if uid is None else 5000)
    assert caught.value.field == field
    assert not PosixAccount.objects.exists()


def test_the_user_the_worker_runs_as_is_refused_whatever_is_configured(researcher):
    me = pwd.getpwuid(__import__("os").getuid()).pw_name
    with pytest.raises(JobValidationError):
        set_account(researcher, me)


def test_a_local_system_account_is_refused_by_name(researcher):
    with pytest.raises(JobValidationError) as caught:
        set_account(researcher, system_name())
    assert caught.value.field == "name"


def test_the_minimum_uid_is_configurable(researcher, settings):
    settings.ALLOT_MIN_JOB_UID = 500
    assert set_account(researcher, "alice", 600, 600).uid == 600


def test_an_ordinary_account_is_accepted(researcher):
    assert set_account(researcher, "alice", 5001, 5000).name == "alice"


def test_the_command_refuses_the_service_account(researcher):
    with pytest.raises(CommandError, match="service account"):
        call_command("posix_account", "researcher", SERVICE)
    assert not PosixAccount.objects.exists()


def test_the_admin_refuses_the_service_account_and_a_system_uid(admin_client, researcher):
    url = "/admin/scheduling/posixaccount/add/"
    for name, uid in ((SERVICE, ""), ("alice", "100")):
        form = {"user": researcher.pk, "name": name, "uid": uid, "gid": "100" if uid else ""}
        response = admin_client.post(url, form)
        assert response.status_code == 200  # the form again, with its error
    assert not PosixAccount.objects.exists()


def test_an_sso_claim_naming_the_service_account_changes_nothing(researcher, settings):
    settings.ALLOT_OIDC_POSIX_CLAIM = "posix_username"
    settings.ALLOT_OIDC_UID_CLAIM = "uid_number"
    settings.ALLOT_OIDC_GID_CLAIM = "gid_number"
    sync_posix_account(researcher, {"posix_username": SERVICE})
    sync_posix_account(researcher, {"posix_username": "alice", "uid_number": 33, "gid_number": 1})
    assert not PosixAccount.objects.exists()


def test_an_account_stored_before_the_rule_cannot_start_or_submit_a_job(
    client, researcher, budget_tree, tmp_path, settings
):
    cluster = make_cluster(tmp_path, name="real", backend="slurm")
    set_account(researcher, "alice")
    client.force_login(researcher)
    body = {"name": "x", "project": "nlp/olmo", "cluster": "real", "gpus": 1}
    created = client.post("/api/v1/jobs/", {**body, "min_runtime_s": 3600}, "application/json")
    assert created.status_code == 201
    job = Job.objects.get()
    settings.ALLOT_SERVICE_USER = "alice"  # the site now runs its worker as alice
    with pytest.raises(BackendError, match="service account"):
        dispatch.launch_spec(job)
    refused = client.post("/api/v1/jobs/", {**body, "min_runtime_s": 3600}, "application/json")
    assert refused.status_code == 400 and refused.json()["field"] == "cluster"
    assert cluster.pk


def test_a_clusters_own_service_user_is_refused_for_its_jobs(
    client, researcher, budget_tree, tmp_path
):
    """A Slurm cluster's ``service_user`` option is who Allot's commands run as on its submit
    host; a job of that account would be submitted without sudo, as Allot itself."""
    make_cluster(tmp_path, name="real", backend="slurm", options={"service_user": "alice"})
    set_account(researcher, "alice")
    client.force_login(researcher)
    body = {"name": "x", "project": "nlp/olmo", "cluster": "real", "gpus": 1}
    refused = client.post("/api/v1/jobs/", {**body, "min_runtime_s": 3600}, "application/json")
    assert refused.status_code == 400 and refused.json()["field"] == "cluster"
    assert "service account" in refused.json()["message"]


def test_the_slurm_backend_never_submits_a_job_as_its_own_service_user():
    from scheduling.backends.base import LaunchSpec
    from scheduling.backends.slurm import SlurmBackend

    backend = SlurmBackend("x", {"service_user": "alice"})
    spec = LaunchSpec(7, "k", "t", "u", "", 1, ("n1",), 1, "true", posix_user="alice")
    with pytest.raises(BackendError, match="service"):
        backend.submit(spec)
