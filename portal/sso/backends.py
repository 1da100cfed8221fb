"""Authentication backends: the password switch and the OpenID Connect backend."""

import logging

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import PermissionDenied, SuspiciousOperation, ValidationError
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from core.logs import event
from portal import sso
from portal.sso import discovery, identities

log = logging.getLogger(__name__)


class PasswordLoginSwitch:
    """With ``ALLOT_PASSWORD_LOGIN=0``, refuses every password check — the login page, the
    admin's login and the API token endpoint all go through ``authenticate()`` — before
    ModelBackend sees it. Raising PermissionDenied stops Django trying the later backends."""

    def authenticate(self, request, password=None, **credentials):
        if password is not None and not sso.password_login():
            raise PermissionDenied("password login is switched off")
        return None

    # No get_user: it never logs anyone in, and force_login (tests) takes the first backend
    # that has one as the session's.


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's code flow, with the endpoints from discovery, the ID token's
    audience and issuer checked, users keyed by (issuer, subject) (portal/sso/identities.py;
    the username claim only names a new account), and roles and the POSIX account following
    the claims at every sign-in."""

    def __init__(self, *args, **kwargs):
        # The parent reads endpoints from settings here; ours come from discovery, later.
        self.UserModel = get_user_model()
        self.OIDC_RP_IDP_SIGN_KEY = None

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: discovery.endpoint("token_endpoint"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: discovery.endpoint("userinfo_endpoint"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: discovery.endpoint("jwks_uri"))
    OIDC_RP_CLIENT_ID = property(lambda self: settings.ALLOT_OIDC_CLIENT_ID)
    OIDC_RP_CLIENT_SECRET = property(lambda self: settings.ALLOT_OIDC_CLIENT_SECRET)
    OIDC_RP_SIGN_ALGO = property(lambda self: settings.ALLOT_OIDC_SIGN_ALGO)

    def authenticate(self, request, **kwargs):
        # Only the callback passes a nonce; password logins pass through untouched.
        if not sso.enabled() or "nonce" not in kwargs:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (discovery.DiscoveryError, SuspiciousOperation, requests.RequestException) as exc:
            # A provider that refuses the code, times out or sends a bad token: back to the
            # login page with a message (LOGIN_REDIRECT_URL_FAILURE), not a server error.
            event(log, "sso_refused", logging.WARNING, reason=str(exc))
            return None

    def get_user(self, user_id):
        # The parent's returns deactivated users too: their sessions would outlive the switch.
        return ModelBackend.get_user(self, user_id)

    def get_payload_data(self, token, key):
        """The ID token's signature, expiry, audience (this client) and issuer; the parent
        checks only the signature."""
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=discovery.document()["issuer"],
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
                leeway=60,
            )
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}") from exc

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims, completed by the userinfo endpoint's (where groups often
        are). Both must be about the same subject."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            userinfo = super().get_userinfo(access_token, id_token, payload)
            if userinfo.get("sub") != payload.get("sub"):
                raise SuspiciousOperation("userinfo is about another subject")
            claims.update(userinfo)
        # Who this is comes from the checked ID token alone, never from userinfo.
        claims["iss"], claims["sub"] = payload.get("iss"), payload.get("sub")
        return claims

    def _username(self, claims) -> str:
        return str(claims.get(settings.ALLOT_OIDC_USERNAME_CLAIM) or "")

    @staticmethod
    def _key(claims) -> tuple[str, str]:
        return str(claims.get("iss") or "").rstrip("/"), str(claims.get("sub") or "")

    def verify_claims(self, claims):
        issuer, subject = self._key(claims)
        if not issuer or not subject or len(issuer) > 255 or len(subject) > 255:
            return False
        username = self._username(claims)
        try:
            UnicodeUsernameValidator()(username)
        except ValidationError:
            return False
        return 0 < len(username) <= 150

    def filter_users_by_claims(self, claims):
        """The account linked to (issuer, subject); an existing account of the claimed
        username only as identities.linkable_by_claim allows (never staff or superuser)."""
        issuer, subject = self._key(claims)
        user = identities.user_for(issuer, subject)
        if user is not None:
            return [user]
        username = self._username(claims)
        existing = self.UserModel.objects.filter(username=username).first()
        if existing is None:
            return []  # the parent calls create_user
        if not identities.linkable_by_claim(existing, issuer):
            identities.refuse("an existing account is linked only explicitly",
                              username=username, issuer=issuer, subject=subject)  # fmt: skip
            raise SuspiciousOperation(f"{username} exists and is not linked to this identity")
        try:
            identities.link(existing, issuer, subject, by="username claim")
        except identities.LinkError as exc:
            raise SuspiciousOperation(str(exc)) from exc
        return [existing]

    def create_user(self, claims):
        issuer, subject = self._key(claims)
        user = identities.new_account(self._username(claims), issuer, subject)
        return None if user is None else self.update_user(user, claims)

    def update_user(self, user, claims):
        from budgets.roles import sync_mapped_roles
        from portal.sso.claims import sync_posix_account, sync_profile

        sync_profile(user, claims)
        groups = claims.get(settings.ALLOT_OIDC_GROUPS_CLAIM) or []
        if isinstance(groups, str):
            groups = [groups]
        if settings.ALLOT_OIDC_ROLE_MAP:
            sync_mapped_roles(user, [str(g) for g in groups], settings.ALLOT_OIDC_ROLE_MAP)
        sync_posix_account(user, claims)
        event(log, "sso_login", user=user.username, groups=sorted(map(str, groups)))
        return user
