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
        ({"min_runtime_s": 9 * 3600}, "min_runtime_s"),
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


def test_protection_beyond_the_cap_points_to_the_exception_workflow(researcher, cluster):
    with pytest.raises(JobValidationError, match="extended_protection exception"):
        submit_job(researcher, request(min_runtime_s=12 * 3600))


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
