"""``POST /api/v1/whatif/`` queues a preview; ``GET /api/v1/whatif/{id}/`` reports it.

Scope and validation live in ``whatif.proposal``; errors come back as ``{"message",
"field"}`` (400 for bad input, 403 for a node outside the caller's reach, 429 when the caller
already has ALLOT_WHATIF_MAX_PER_USER previews waiting). A preview is seen only by whoever
asked for it.
"""

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from budgets.api import ERROR, raise_for
from budgets.errors import BudgetError
from core.parsing import parse_id
from whatif import services
from whatif.models import Preview
from whatif.proposal import ScopeError
from whatif.serializers import PreviewCreatedSerializer, PreviewRequestSerializer, PreviewSerializer


class PreviewLimit(exceptions.APIException):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "too_many_previews"


def preview_for(user, pk) -> Preview:
    """The one choke point: a preview is its requester's alone."""
    try:
        return Preview.objects.select_related("workload").get(pk=parse_id(pk), requested_by=user)
    except Preview.DoesNotExist:
        raise Http404("No such preview") from None


class PreviewCreateView(APIView):
    @extend_schema(
        summary="Preview a grant change on the organisation's recent workload",
        request=PreviewRequestSerializer,
        responses={202: PreviewCreatedSerializer, 400: ERROR, 403: ERROR, 429: ERROR},
    )
    def post(self, request):
        body = PreviewRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            preview = services.request_preview(
                request.user, body.validated_data["weeks"], body.validated_data["grants"]
            )
        except ScopeError as error:
            raise exceptions.PermissionDenied({error.field: error.message}) from None
        except BudgetError as error:
            raise_for(error)
        except services.TooManyPreviews as error:
            raise PreviewLimit(error.message) from None
        return Response({"id": preview.pk, "status": preview.status}, status.HTTP_202_ACCEPTED)


class PreviewDetailView(APIView):
    @extend_schema(
        summary="A preview's status, progress (0–1) and, when done, both replays",
        responses={200: PreviewSerializer, 404: ERROR},
    )
    def get(self, request, pk):
        preview = preview_for(request.user, pk)
        return Response(PreviewSerializer(preview, context={"request": request}).data)
