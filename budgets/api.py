"""REST API for budgets: list and read nodes with their numbers, change a grant, transfer.

Scope comes from `budgets.access`, writes from `budgets.services`; service errors become
`{"message", "field"}` through portal.api (validation → 400, concurrent edit → 409).
"""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from budgets import access, services
from budgets.balances import tree_stats
from budgets.errors import BudgetError, ConflictError
from budgets.serializers import (
    AuditEntrySerializer,
    BudgetNodeSerializer,
    GrantUpdateSerializer,
    TransferResultSerializer,
    TransferSerializer,
)

ERROR = OpenApiResponse(description='{"message": ..., "field": ..., "errors": {...}}')


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The value changed since you read it."
    default_code = "conflict"


def raise_for(error: BudgetError):
    if isinstance(error, ConflictError):
        raise Conflict({error.field: error.message})
    raise exceptions.ValidationError({error.field: error.message})


def _parent_ids(stats) -> dict[int, int | None]:
    by_path = {s.node.path: s.node.pk for s in stats.values()}
    return {s.node.pk: by_path.get(s.node.path[: -s.node.steplen]) for s in stats.values()}


def serialize(stats, items, many=False):
    return BudgetNodeSerializer(items, many=many, context={"parent_ids": _parent_ids(stats)}).data


@extend_schema_view(
    list=extend_schema(summary="Budget nodes you may see, with this period's numbers"),
    retrieve=extend_schema(summary="One budget node", responses={200: BudgetNodeSerializer}),
    partial_update=extend_schema(
        summary="Change a node's grant for this period",
        request=GrantUpdateSerializer,
        responses={200: BudgetNodeSerializer, 400: ERROR, 403: ERROR, 404: ERROR, 409: ERROR},
    ),
)
class BudgetNodeViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = BudgetNodeSerializer
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self):
        return access.visible_nodes(self.request.user)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        stats = tree_stats()
        return self.get_paginated_response(serialize(stats, [stats[n.pk] for n in page], many=True))

    def retrieve(self, request, pk=None, *args, **kwargs):
        node = access.get_node_for_user(request.user, pk)
        stats = tree_stats()
        return Response(serialize(stats, stats[node.pk]))

    def partial_update(self, request, pk=None, *args, **kwargs):
        node = access.get_node_for_user(request.user, pk, write=True)
        payload = GrantUpdateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        try:
            services.set_grant(
                request.user,
                node,
                data["grant_gpu_hours"],
                expected_version=data.get("version"),
                reason=data["reason"],
            )
        except BudgetError as error:
            raise_for(error)
        stats = tree_stats()
        return Response(serialize(stats, stats[node.pk]))

    @extend_schema(summary="The node's audit trail", responses=AuditEntrySerializer(many=True))
    @action(detail=True, methods=["get"])
    def history(self, request, pk=None):
        node = access.get_node_for_user(request.user, pk)
        entries = node.audit.select_related("actor")[:200]
        return Response(AuditEntrySerializer(entries, many=True).data)


def _node_for(user, pk, field):
    """Scope errors on a transfer name the field at fault, like every other error."""
    try:
        return access.get_node_for_user(user, pk, write=True)
    except Http404:
        raise exceptions.NotFound({field: "No such budget node."}) from None
    except PermissionDenied:
        raise exceptions.PermissionDenied({field: "You cannot change this budget."}) from None


class TransferView(APIView):
    @extend_schema(
        summary="Move GPU-hours between two sibling nodes, as one action",
        request=TransferSerializer,
        responses={201: TransferResultSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
    )
    def post(self, request):
        payload = TransferSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        source = _node_for(request.user, data["source"], "source")
        target = _node_for(request.user, data["target"], "target")
        try:
            services.transfer_gpu_hours(
                request.user, source, target, data["gpu_hours"], reason=data["reason"]
            )
        except BudgetError as error:
            raise_for(error)
        stats = tree_stats()
        body = {
            "source": serialize(stats, stats[source.pk]),
            "target": serialize(stats, stats[target.pk]),
        }
        return Response(body, status=status.HTTP_201_CREATED)
