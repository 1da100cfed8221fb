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
