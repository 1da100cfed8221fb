"""Single sign-on with an OpenID Connect provider (mozilla-django-oidc underneath).

``discovery`` reads the issuer's endpoints lazily; ``backends`` turns the provider's claims into
an Allot user (roles through ``budgets.roles``, the POSIX account through
``scheduling.identity``) and holds the switch that closes password login; ``views`` are the
login page, the sign-in redirect, its callback and the admin's login door.
"""

from django.conf import settings


def enabled() -> bool:
    return bool(settings.ALLOT_OIDC_ISSUER)


def password_login() -> bool:
    return bool(getattr(settings, "ALLOT_PASSWORD_LOGIN", True))
