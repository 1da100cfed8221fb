"""The token endpoint: ``POST /api/v1/auth/token/`` (username, password → ``{"token": ...}``)."""

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from portal import sso
from portal.tokens import client_address, issue_token


class Credentials(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenThrottle(SimpleRateThrottle):
    """Every token request counts, per client address (failed ones are also counted by axes,
    per username and address). Per web process: the cache is local."""

    scope = "token"

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)  # read now, not at import

    def get_ident(self, request):
        """The address axes also counts (portal.tokens.client_address): DRF's own reading
        takes a client-written X-Forwarded-For unless NUM_PROXIES is set, and is read once."""
        return client_address(request) or ""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


@extend_schema(
    request=Credentials,
    responses=inline_serializer(
        "TokenResponse", {"token": serializers.CharField(), "expiry": serializers.DateTimeField()}
    ),
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
@throttle_classes([TokenThrottle])
def obtain_token(request):
    """Exchange a username and password for an API token (``Authorization: Token …``).
    Tokens expire; list and revoke them at /account/tokens/."""
    if not sso.password_login():
        raise PermissionDenied(
            "Password login is switched off: sign in with single sign-on in the browser and "
            "make a token at /account/tokens/."
        )
    form = Credentials(data=request.data)
    form.is_valid(raise_exception=True)
    # The Django request, not DRF's wrapper: axes marks a locked-out client on it.
    user = authenticate(request._request, **form.validated_data)
    if user is None:
        raise ValidationError({"non_field_errors": "Unable to log in with those credentials."})
    instance, token = issue_token(user)
    return Response({"token": token, "expiry": instance.expiry})
