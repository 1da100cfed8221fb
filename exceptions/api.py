"""REST API for exceptions (contract in ARCHITECTURE.md): list, create, approve, reject,
withdraw. Same rules as the pages: visibility through `access`, decisions through services."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from exceptions import services
from exceptions.access import get_request_for_user, visible_requests
from exceptions.errors import ExceptionError, ExceptionPermissionError
from exceptions.serializers import (
    DecisionSerializer,
    ExceptionCreateSerializer,
    ExceptionSerializer,
)


def _raise_for(exc: ExceptionError):
    if isinstance(exc, ExceptionPermissionError):
        raise PermissionDenied({exc.field or "detail": exc.message})
    raise ValidationError({exc.field or "non_field_errors": exc.message})


class ExceptionViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = ExceptionSerializer

    def get_queryset(self):
        rows = visible_requests(self.request.user).for_list()
        for name in ("state", "kind"):
            value = self.request.query_params.get(name)
            if value:
                rows = rows.filter(**{name: value})
        return rows.order_by("-submitted_at", "-id")

    def retrieve(self, request, pk=None):
        return Response(ExceptionSerializer(get_request_for_user(request.user, pk)).data)

    @extend_schema(request=ExceptionCreateSerializer, responses={201: ExceptionSerializer})
    def create(self, request):
        form = ExceptionCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = {k: v for k, v in form.validated_data.items() if v is not None}
        try:
            created = services.request_exception(request.user, data.pop("kind"), **data)
        except ExceptionError as exc:
            _raise_for(exc)
        return Response(self._fresh(created.pk), status=status.HTTP_201_CREATED)

    def _fresh(self, pk):
        return ExceptionSerializer(get_request_for_user(self.request.user, pk)).data

    def _decide(self, request, pk, service, **kwargs):
        found = get_request_for_user(request.user, pk)  # 404 outside the caller's view
        try:
            service(request.user, found.pk, **kwargs)
        except ExceptionError as exc:
            _raise_for(exc)
        return Response(self._fresh(found.pk))

    def _decide_with(self, request, pk, service, field):
        """Approve or reject: the decision's ``field`` (comment or reason) goes to ``service``."""
        form = DecisionSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return self._decide(request, pk, service, **{field: form.validated_data[field]})

    @extend_schema(request=DecisionSerializer, responses=ExceptionSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._decide_with(request, pk, services.approve_exception, "comment")

    @extend_schema(request=DecisionSerializer, responses=ExceptionSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        return self._decide_with(request, pk, services.reject_exception, "reason")

    @extend_schema(request=None, responses=ExceptionSerializer)
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        return self._decide(request, pk, services.withdraw_exception)
