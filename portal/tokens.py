"""API tokens and login throttling: the glue between Allot and django-rest-knox / django-axes.

Tokens are knox's: only a SHA-512 digest is stored, each expires (``ALLOT_API_TOKEN_TTL_H``),
a user lists and revokes theirs on /account/tokens/, and all of them die when the password
changes. Failed logins are counted by axes on every door (/login/, /admin/, the token
endpoint); a locked-out client gets 429.
"""

from __future__ import annotations

import re
from functools import cache
from hmac import compare_digest

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS, knox_settings
from rest_framework import exceptions

from core.raw_rows import reading, table

# knox writes 64 hex characters (a prefix is not configured); anything else is not a token.
TOKEN_SHAPE = re.compile(r"[0-9a-f]{64}")
LOCKED_OUT = "Too many failed logins: try again later."


def issue_token(user) -> tuple[AuthToken, str]:
    """A new token for the user: the row (digest only) and the secret, shown once."""
    return AuthToken.objects.create(user=user)


def live_tokens(user):
    return (
        AuthToken.objects.filter(user=user).exclude(expiry__lt=timezone.now()).order_by("-created")
    )


def revoke_token(user, token_key: str) -> bool:
    """Revoke one of the user's own tokens, named by its first characters (knox's token_key,
    which is not enough to authenticate); False if they hold no such token."""
    deleted, _ = AuthToken.objects.filter(user=user, token_key=str(token_key)[:25]).delete()
    return bool(deleted)


def revoke_all_tokens(user) -> int:
    deleted, _ = AuthToken.objects.filter(user=user).delete()
    return deleted


class TokenAuthentication(KnoxTokenAuthentication):
    """knox's authentication, refusing anything not shaped like a token before it reaches a
    query (a NUL byte in a header must be a 401, not a database error), and reading the
    token's row and its user with one statement whose text is made once (``_tokens_with_key``)
    where knox composes the same join through the ORM on every API call: ~1,300 Python calls,
    an eighth of a submission's. Nothing is cached between requests: a revoked
    token is refused at its next use."""

    def authenticate_credentials(self, token: bytes):
        text = token.decode("latin-1")
        if not TOKEN_SHAPE.fullmatch(text):
            raise exceptions.AuthenticationFailed("Invalid token.")
        digest = hash_token(text)
        for auth_token in _tokens_with_key(text[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if self._cleanup_token(auth_token):
                continue
            if compare_digest(digest, auth_token.digest):
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                return self.validate_user(auth_token)
        raise exceptions.AuthenticationFailed("Invalid token.")

    def _cleanup_token(self, auth_token) -> bool:
        """Skip (and delete) this token if it has expired. knox also reads every other token
        of the user on every request to delete their expired ones: a query per API call that
        grows with the user's tokens (each CLI login adds one). Expired tokens are refused
        anyway; ``portal.tasks.sweep_expired_tokens`` deletes them every hour."""
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False


@cache
def _token_join() -> str:
    """The statement knox's ``filter(token_key=...).select_related("user")`` sends."""
    User = get_user_model()
    quote = connection.ops.quote_name
    token_user = quote(AuthToken._meta.get_field("user").column)
    token_key = quote(AuthToken._meta.get_field("token_key").column)
    return (
        f"SELECT {reading(AuthToken).columns('t')}, {reading(User).columns('u')} "
        f"FROM {table(AuthToken)} t JOIN {table(User)} u "
        f"ON t.{token_user} = u.{quote(User._meta.pk.column)} WHERE t.{token_key} = %s"
    )


def _tokens_with_key(token_key: str) -> list[AuthToken]:
    """The tokens whose key is ``token_key`` (knox's first characters), each with its user."""
    tokens, users = reading(AuthToken), reading(get_user_model())
    with connection.cursor() as cursor:
        cursor.execute(_token_join(), [token_key])
        rows = cursor.fetchall()
    found = []
    for row in rows:
        auth_token = tokens.instance(row[: tokens.width])
        auth_token.user = users.instance(row[tokens.width :])
        found.append(auth_token)
    return found


class RevokeTokensOnPasswordChange:
    """Listed in AUTH_PASSWORD_VALIDATORS for its ``password_changed`` hook, which Django calls
    after any ``set_password`` + ``save`` (password change and reset views, the admin,
    ``changepassword``): a new password ends every API token, as it ends other sessions."""

    def validate(self, password, user=None):
        return None

    def password_changed(self, password, user=None):
        if user is not None and user.pk:
            revoke_all_tokens(user)

    def get_help_text(self):
        return ""


def client_address(request) -> str | None:
    """Who is knocking, for throttling: the socket's peer, or with ALLOT_BEHIND_PROXY=1 the
    last address in X-Forwarded-For, the one our proxy appended (earlier ones are the
    client's to write)."""
    if settings.ALLOT_BEHIND_PROXY:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[-1].strip()
        if forwarded:
            return forwarded[:64]
    return request.META.get("REMOTE_ADDR")


def lockout_response(request, original_response=None, credentials=None):
    """axes' answer to a locked-out client: JSON for the API (our error shape), a page else."""
    if request.path.startswith("/api/"):
        return JsonResponse({"message": LOCKED_OUT, "field": None}, status=429)
    return HttpResponse(LOCKED_OUT, status=429, content_type="text/plain; charset=utf-8")


class TokenScheme(KnoxTokenScheme):
    """The OpenAPI security scheme for our subclass: ``Authorization: Token <key>``."""

    target_class = "portal.tokens.TokenAuthentication"
    name = "tokenAuth"
