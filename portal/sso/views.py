"""The login page (password form and/or "Sign in with ..."), the sign-in redirect to the
provider, its callback, and the admin's login door."""

import logging

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from core.logs import event
from portal import sso
from portal.forms import LoginForm
from portal.sso import discovery

log = logging.getLogger(__name__)
PASSWORD_OFF = "Password login is switched off here: sign in with single sign-on."
SSO_FAILED = "Single sign-on did not complete. Try again, or ask an administrator."
SSO_DOWN = "The identity provider cannot be reached just now. Try again in a minute."


def login_context(request) -> dict:
    error = SSO_FAILED if request.GET.get("sso") == "failed" else ""
    return {
        "password_login": sso.password_login(),
        "sso_provider": settings.ALLOT_OIDC_PROVIDER_NAME if sso.enabled() else "",
        "sso_error": error,
    }


class LoginView(auth_views.LoginView):
    authentication_form = LoginForm

    def post(self, request, *args, **kwargs):
        if not sso.password_login():
            context = {**login_context(request), "sso_error": PASSWORD_OFF}
            return render(request, "registration/login.html", context, status=403)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **login_context(self.request)}


class SignIn(OIDCAuthenticationRequestView):
    """Redirects to the provider's authorization endpoint (state, nonce, PKCE S256)."""

    def __init__(self, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)  # not the settings reads

    @staticmethod
    def get_settings(attr, *args):
        if attr == "OIDC_RP_SCOPES":
            return settings.ALLOT_OIDC_SCOPES
        return import_from_settings(attr, *args)

    def get(self, request):
        if not sso.enabled():
            raise Http404("single sign-on is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery.endpoint("authorization_endpoint")
        except discovery.DiscoveryError as exc:
            event(log, "sso_discovery_failed", logging.WARNING, reason=str(exc))
            context = {**login_context(request), "sso_error": SSO_DOWN}
            return render(request, "registration/login.html", context, status=503)
        self.OIDC_RP_CLIENT_ID = settings.ALLOT_OIDC_CLIENT_ID
        return super().get(request)


class Callback(OIDCAuthenticationCallbackView):
    def get(self, request):
        if not sso.enabled():
            raise Http404("single sign-on is not configured")
        return super().get(request)


def admin_login(request):
    """The admin's own password form, unless password login is off: then our login page."""
    if sso.password_login():
        return admin.site.login(request)
    next_url = request.GET.get("next") or reverse("admin:index")
    return redirect(f"{reverse('login')}?{urlencode({'next': next_url})}")
