from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.response import Response


@extend_schema(
    request=AuthTokenSerializer,
    responses=inline_serializer("TokenResponse", {"token": serializers.CharField()}),
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
def obtain_token(request):
    """Exchange a username and password for an API token (``Authorization: Token …``)."""
    serializer = AuthTokenSerializer(data=request.data, context={"request": request})
    serializer.is_valid(raise_exception=True)
    token, _ = Token.objects.get_or_create(user=serializer.validated_data["user"])
    return Response({"token": token.key})
