"""The API's jobs are DRF's jobs: ``JobSerializer`` answers from a plan made once per class
(``core.representation``), and every answer must equal what DRF's own
``to_representation`` gives for the same job and viewer, in every state a job reaches."""

import pytest
from django.test import RequestFactory
from rest_framework import serializers
from rest_framework.request import Request

from core.representation import PlannedRepresentation
from scheduling import services
from scheduling.models import Job
from scheduling.serializers import JobSerializer
from tests.scheduling.conftest import submit_many

pytestmark = pytest.mark.django_db


def _drf(job, context):
    serializer = JobSerializer(job, context=context)
    return serializers.ModelSerializer.to_representation(serializer, job)


def _context(user):
    request = Request(RequestFactory().get("/api/v1/jobs/"))
    request.user = user
    return {"request": request}


def _jobs_in_every_state(researcher, cluster, run_pass, settings):
    submit_many(researcher, cluster, 3, gpus=8)  # two run, one waits
    free = services.JobRequest(
        name="free", project="", cluster=cluster.name, gpus=1, min_runtime_s=600,
        env={"SEED": "7"}, sim_duration_s=None,
    )  # fmt: skip
    long = services.JobRequest(
        name="long", project="nlp/olmo", cluster=cluster.name, gpus=1,
        min_runtime_s=settings.ALLOT_MAX_MIN_RUNTIME_S + 3600,
    )  # fmt: skip
    services.submit_job(researcher, free)
    services.submit_job(researcher, long)
    run_pass(cluster)
    pending = Job.objects.filter(state=Job.State.PENDING).order_by("pk").first()
    services.cancel_job(researcher, pending.pk)
    run_pass(cluster)
    jobs = list(Job.objects.select_related("owner", "project", "cluster").order_by("pk"))
    states = {job.state for job in jobs}
    assert {Job.State.RUNNING, Job.State.PENDING, Job.State.CANCELLED} <= states, states
    assert any(job.nodes for job in jobs)
    assert any(services.protection_request_url(job) for job in jobs)
    return jobs


def test_every_job_answers_as_drf_would_for_every_viewer(
    researcher, outsider, cluster_admin, cluster, run_pass, settings
):
    jobs = _jobs_in_every_state(researcher, cluster, run_pass, settings)
    # The owner first, then viewers who may not see the command: a plan that kept the first
    # serializer's context would show them the owner's view.
    for viewer in (researcher, outsider, cluster_admin, researcher):
        context = _context(viewer)
        for job in jobs:
            assert JobSerializer(job, context=context).data == _drf(job, context), (job, viewer)
        listed = JobSerializer(jobs, many=True, context=context).data
        assert listed == [_drf(job, context) for job in jobs]
    hidden = JobSerializer(jobs[0], context=_context(outsider)).data
    assert hidden["command"] is None and hidden["env"] is None
    shown = JobSerializer(jobs[0], context=_context(researcher)).data
    assert shown["command"] == jobs[0].command


def test_a_job_whose_related_row_is_missing_answers_as_drf_would(researcher, cluster, settings):
    job = submit_many(researcher, cluster, 1)[0]
    job = Job.objects.select_related("owner", "project", "cluster").get(pk=job.pk)
    job.project = None  # an unfunded job: the path through project is empty
    context = _context(researcher)
    assert JobSerializer(job, context=context).data == _drf(job, context)


def test_a_field_that_may_read_the_context_is_refused_when_the_plan_is_made(researcher, cluster):
    class Related(PlannedRepresentation, serializers.ModelSerializer):
        class Meta:
            model = Job
            fields = ["id", "owner"]  # a PrimaryKeyRelatedField

    job = submit_many(researcher, cluster, 1)[0]
    with pytest.raises(TypeError, match="Related.owner"):
        Related(job).data  # noqa: B018
