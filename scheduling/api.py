"""REST API for jobs and clusters (contract in ARCHITECTURE.md)."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from scheduling import services
from scheduling.access import get_job_for_user, get_node_for_admin, visible_jobs
from scheduling.errors import JobPermissionError, JobValidationError
from scheduling.explain import explain_job
from scheduling.job_filters import LIST_PARAMETERS, filter_jobs
from scheduling.models import Cluster, Job
from scheduling.serializers import (
    ClusterSerializer,
    DrainSerializer,
    JobSerializer,
    JobSubmitSerializer,
    NodeSerializer,
)


def _raise_for(exc):
    if isinstance(exc, JobPermissionError):
        raise PermissionDenied({exc.field or "detail": exc.message})
    raise ValidationError({exc.field or "non_field_errors": exc.message})


@extend_schema_view(
    list=extend_schema(
        summary="Jobs you may see, filtered and ordered like a queue if asked",
        parameters=LIST_PARAMETERS,
    )
)
class JobViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = JobSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Job.objects.none()
        jobs = visible_jobs(self.request.user).select_related("owner", "project", "cluster")
        return filter_jobs(jobs, self.request.query_params, self.request.user)

    def _data(self, job):
        return JobSerializer(job, context=self.get_serializer_context()).data

    def retrieve(self, request, pk=None):
        return Response(self._data(get_job_for_user(request.user, pk)))

    @extend_schema(request=JobSubmitSerializer, responses={201: JobSerializer})
    def create(self, request):
        form = JobSubmitSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            job = services.submit_job(request.user, services.JobRequest(**form.validated_data))
        except (JobValidationError, JobPermissionError) as exc:
            _raise_for(exc)
        return Response(self._data(job), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = get_job_for_user(request.user, pk, write=True)
        try:
            job = services.cancel_job(request.user, job.pk)
        except (JobValidationError, JobPermissionError) as exc:
            _raise_for(exc)
        return Response(self._data(job))

    @action(detail=True, methods=["get"])
    def explain(self, request, pk=None):
        return Response(explain_job(get_job_for_user(request.user, pk), viewer=request.user))


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ClusterSerializer
    queryset = Cluster.objects.prefetch_related("nodes").order_by("name")

    @extend_schema(request=DrainSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"], url_path=r"nodes/(?P<node_id>\d+)/drain")
    def drain(self, request, pk=None, node_id=None):
        form = DrainSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            node = get_node_for_admin(request.user, node_id)
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from None
        if str(node.cluster_id) != str(pk) and node.cluster.name != pk:
            raise ValidationError({"node": "that node belongs to another cluster"})
        try:
            node = services.set_node_drain(request.user, node.pk, **form.validated_data)
        except (JobValidationError, JobPermissionError) as exc:
            _raise_for(exc)
        return Response(NodeSerializer(node).data)
