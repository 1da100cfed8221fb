"""REST API for budgets: list and read nodes with their numbers; change a grant, a name or a
weight; create, move and archive nodes; transfer between siblings.

Scope comes from `budgets.access`, writes from `budgets.services` (through `budgets.forms` when
one request carries several changes); service errors become `{"message", "field"}` through
portal.api (validation → 400, concurrent edit → 409). A node named in the body that the caller
may not see answers 404 and one they may not build under 403, both naming that field.
"""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from budgets import access, forms, services
from budgets.balances import burn_by_path, tree_stats
from budgets.errors import BudgetError, ConflictError
from budgets.serializers import (
    ArchivedNodeSerializer,
    AuditEntrySerializer,
    BudgetNodeSerializer,
    NodeArchiveSerializer,
    NodeCreateSerializer,
    NodeMoveSerializer,
    NodeUpdateSerializer,
    TransferResultSerializer,
    TransferSerializer,
)

ERROR = OpenApiResponse(description='{"message": ..., "field": ..., "errors": {...}}')
REFUSALS = {400: ERROR, 403: ERROR, 404: ERROR}


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
    context = {"parent_ids": _parent_ids(stats), "burn": burn_by_path()}
    return BudgetNodeSerializer(items, many=many, context=context).data


@extend_schema_view(
    list=extend_schema(summary="Budget nodes you may see, with this period's numbers"),
    retrieve=extend_schema(summary="One budget node", responses={200: BudgetNodeSerializer}),
    create=extend_schema(
        summary="Create a child node, optionally with its first grant",
        request=NodeCreateSerializer,
        responses={201: BudgetNodeSerializer, **REFUSALS},
    ),
    partial_update=extend_schema(
        summary="Change a node's name, slug, weight and/or grant for this period, all or none",
        request=NodeUpdateSerializer,
        responses={200: BudgetNodeSerializer, **REFUSALS, 409: ERROR},
    ),
)
class BudgetNodeViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = BudgetNodeSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]

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

    def create(self, request, *args, **kwargs):
        data = _valid(NodeCreateSerializer, request)
        parent = _parent_for(request.user, data["parent"])
        try:
            node = forms.create_child(
                request.user,
                parent,
                name=data["name"],
                slug=data["slug"],
                grant_gpu_hours=data.get("grant_gpu_hours"),
                reason=data["reason"],
            )
        except BudgetError as error:
            raise_for(error)
        stats = tree_stats()
        return Response(serialize(stats, stats[node.pk]), status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None, *args, **kwargs):
        node = access.get_node_for_user(request.user, pk, write=True)
        data = _valid(NodeUpdateSerializer, request)
        changes = {f: data[f] for f in ("name", "slug", "weight", "grant_gpu_hours") if f in data}
        try:
            forms.change_node(
                request.user, node, version=data.get("version"), reason=data["reason"], **changes
            )
        except BudgetError as error:
            raise_for(error)
        stats = tree_stats()
        return Response(serialize(stats, stats[node.pk]))

    @extend_schema(
        summary="Move a node and its subtree under another parent",
        request=NodeMoveSerializer,
        responses={200: BudgetNodeSerializer, **REFUSALS},
    )
    @action(detail=True, methods=["post"])
    def move(self, request, pk=None):
        node = access.get_node_for_user(request.user, pk, write=True)
        data = _valid(NodeMoveSerializer, request)
        parent = _parent_for(request.user, data["parent"])
        try:
            services.move_node(request.user, node, parent, reason=data["reason"])
        except BudgetError as error:
            raise_for(error)
        stats = tree_stats()
        return Response(serialize(stats, stats[node.pk]))

    @extend_schema(
        summary="Archive a node and its subtree (it must hold no grant and fund no running job)",
        request=NodeArchiveSerializer,
        responses={200: ArchivedNodeSerializer, **REFUSALS},
    )
    @action(detail=True, methods=["post"])
    def archive(self, request, pk=None):
        node = access.get_node_for_user(request.user, pk, write=True)
        data = _valid(NodeArchiveSerializer, request)
        try:
            node = services.archive_node(request.user, node, reason=data["reason"])
        except BudgetError as error:
            raise_for(error)
        return Response(ArchivedNodeSerializer(node).data)

    @extend_schema(summary="The node's audit trail", responses=AuditEntrySerializer(many=True))
    @action(detail=True, methods=["get"])
    def history(self, request, pk=None):
        node = access.get_node_for_user(request.user, pk)
        entries = node.audit.select_related("actor")[:200]
        return Response(AuditEntrySerializer(entries, many=True).data)


def _valid(serializer_class, request) -> dict:
    payload = serializer_class(data=request.data)
    payload.is_valid(raise_exception=True)
    return payload.validated_data


def _parent_for(user, pk):
    """The parent named in the body: one the caller may see (404) and build under (403)."""
    try:
        parent = access.get_node_for_user(user, pk)
    except Http404:
        raise exceptions.NotFound({"parent": "No such budget node."}) from None
    if not access.can_manage_structure(user, parent):
        raise exceptions.PermissionDenied({"parent": f"You cannot add nodes under {parent.label}."})
    return parent


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
