import pytest

from scheduling.errors import JobPermissionError, JobValidationError
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job


def request(**overrides):
    values = dict(
        name="pretrain", project="nlp/olmo", cluster="jupiter", gpus=8, min_runtime_s=3600
    )
    values.update(overrides)
    return JobRequest(**values)


def test_a_member_submits_into_their_project(researcher, cluster):
    job = submit_job(researcher, request())
    assert job.state == Job.State.PENDING
    assert job.project.slug_path == "nlp/olmo"
    assert [e.kind for e in job.events.all()] == ["submitted"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"project": "nlp/tulu"}, "project"),
        ({"project": "vision/segmentation"}, "project"),
        ({"cluster": "saturn"}, "cluster"),
        ({"gpus": 17}, "gpus"),
        ({"gpus": 12}, "gpus"),
        ({"min_runtime_s": 100 * 3600}, "min_runtime_s"),
        ({"min_runtime_s": 10}, "min_runtime_s"),
        ({"kind": "interactive", "min_runtime_s": 3 * 3600}, "min_runtime_s"),
        ({"name": "  "}, "name"),
        ({"priority": "highest"}, "priority"),
    ],
)
def test_bad_submissions_name_the_field_and_create_nothing(researcher, cluster, overrides, field):
    with pytest.raises((JobValidationError, JobPermissionError)) as caught:
        submit_job(researcher, request(**overrides))
    assert caught.value.field == field
    assert Job.objects.count() == 0


def test_protection_beyond_the_cap_points_to_the_exception_workflow(client, researcher, cluster):
    job = submit_job(researcher, request(min_runtime_s=12 * 3600))
    url = f"/exceptions/new/protection/{job.pk}/?hours=12"
    assert job.state == Job.State.PENDING and job.min_runtime_s == 12 * 3600
    assert url in job.events.get(kind="protection").message
    client.force_login(researcher)
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["protection_request"] == url
    assert url in client.get(f"/jobs/{job.pk}/").content.decode()
    form = client.get(url).content.decode()
    assert 'value="12"' in form  # the request is prefilled with the hours asked for
    response = client.post(url, {"hours": "12", "justification": "A 12 h pretraining step."})
    assert response.status_code == 302
    from exceptions.models import ExceptionRequest

    assert ExceptionRequest.objects.get(job=job).hours == 12


def test_the_protection_request_counts_only_what_the_contract_protects(researcher, cluster):
    """A 12 h min runtime is protected for 8 h by contract: asking for 12 h is not 'already
    protected'."""
    from exceptions.services import request_exception

    job = submit_job(researcher, request(min_runtime_s=12 * 3600))
    made = request_exception(
        researcher, "extended_protection", job=job, hours="12", justification="Long step."
    )
    assert made.hours == 12


def test_unfunded_work_needs_no_project(outsider, cluster):
    job = submit_job(outsider, request(project=""))
    assert job.project is None


def test_api_submission_refusal_is_json_naming_the_field(client, researcher, cluster):
    client.force_login(researcher)
    response = client.post(
        "/api/v1/jobs/",
        {
            "name": "x",
            "project": "nlp/olmo",
            "cluster": "jupiter",
            "gpus": 64,
            "min_runtime_s": 3600,
        },
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "gpus"
    assert Job.objects.count() == 0


def test_api_submission_into_a_foreign_project_is_forbidden(client, researcher, cluster):
    client.force_login(researcher)
    response = client.post(
        "/api/v1/jobs/",
        {
            "name": "x",
            "project": "vision/segmentation",
            "cluster": "jupiter",
            "gpus": 1,
            "min_runtime_s": 3600,
        },
        content_type="application/json",
    )
    assert response.status_code == 403
    assert response.json()["field"] == "project"


# --- the job's declared environment (scheduling.job_env) -------------------------------------


def api_submit(client, **extra):
    body = {"name": "x", "project": "nlp/olmo", "cluster": "jupiter", "gpus": 1}
    body.update(min_runtime_s=3600, **extra)
    return client.post("/api/v1/jobs/", body, content_type="application/json")


def test_a_job_declares_its_environment_through_the_api_and_its_owner_reads_it_back(
    client, researcher, project_lead, manager, cluster
):
    env = {"WANDB_PROJECT": "olmo", "PATH": "/opt/conda/bin:/usr/bin", "NOTE": "a,b; 'c'\n"}
    client.force_login(researcher)
    response = api_submit(client, env=env)
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert job.env == env
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["env"] == env
    client.force_login(project_lead)
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["env"] == env
    client.force_login(manager)  # sees the job; values may be credentials: not its env
    seen = client.get(f"/api/v1/jobs/{job.pk}/")
    assert seen.status_code == 200 and seen.json()["env"] is None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ALLOT_JOB_ID": "1"}, "ALLOT_JOB_ID"),
        ({"SLURM_JOB_ID": "1"}, "SLURM_JOB_ID"),
        ({"slurm_conf": "x"}, "slurm_conf"),
        ({"LD_PRELOAD": "/tmp/x.so"}, "LD_PRELOAD"),
        ({"HOME": "/root"}, "HOME"),
        ({"1BAD": "x"}, "1BAD"),
        ({"BAD NAME": "x"}, "BAD NAME"),
        ({"BIG": "x" * 4097}, "BIG"),
        ({"NUL": "a\u0000b"}, "NUL"),
        ({f"V{i}": "x" for i in range(65)}, "65 variables"),
    ],
)
def test_a_bad_environment_is_a_400_naming_env_and_the_variable(
    client, researcher, cluster, env, named
):
    client.force_login(researcher)
    response = api_submit(client, env=env)
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "env", body
    assert named in str(body["message"]) + str(body["errors"])
    assert Job.objects.count() == 0


def test_the_service_refuses_a_bad_environment_whoever_calls_it(researcher, cluster):
    with pytest.raises(JobValidationError) as caught:
        submit_job(researcher, request(env={"SRUN_CPUS_PER_TASK": "4"}))
    assert caught.value.field == "env" and "SRUN_CPUS_PER_TASK" in caught.value.message


def form_post(client, env: str):
    return client.post(
        "/jobs/",
        {
            "name": "with-env",
            "project": "nlp/olmo",
            "cluster": "jupiter",
            "gpus": 1,
            "min_runtime_hours": "1",
            "kind": "batch",
            "command": "python train.py",
            "env": env,
        },
    )


def test_the_submit_form_takes_one_name_value_line_per_variable(client, researcher, cluster):
    client.force_login(researcher)
    page = client.get("/jobs/").content.decode()
    assert 'name="env"' in page
    response = form_post(client, "WANDB_PROJECT=olmo\r\n\r\n# a comment\nURL=http://x/?a=b,c\n")
    assert response.status_code == 302
    assert Job.objects.get().env == {"WANDB_PROJECT": "olmo", "URL": "http://x/?a=b,c"}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("SLURM_EXPORT_ENV=ALL", "SLURM_EXPORT_ENV"),
        ("A=1\nA=2", "A is given twice"),
        ("just words", "NAME=value"),
        ("LD_AUDIT=/x.so", "LD_AUDIT"),
    ],
)
def test_the_submit_form_shows_a_bad_line_on_the_env_field(
    client, researcher, cluster, text, named
):
    client.force_login(researcher)
    response = form_post(client, text)
    assert response.status_code == 400
    assert Job.objects.count() == 0
    form = response.context["form"]
    assert named in " ".join(form.errors["env"])
