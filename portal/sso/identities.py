"""Who signs in through single sign-on: the (issuer, subject) pair and the account it is
linked to (portal.models.SsoIdentity).

1. A known pair signs in as its account, whatever username it now claims.
2. An unknown pair whose username claim names no account gets a new account and the pair.
3. An unknown pair whose username claim names an existing account is refused, unless
   ``ALLOT_OIDC_LINK_EXISTING=1`` and that account is ordinary (not staff, not superuser,
   active) and has no identity from this issuer yet: a claim never links a staff or superuser
   account; an administrator links one with :func:`link` (``manage.py sso_link``, the admin).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.logs import event
from portal.models import SsoIdentity

log = logging.getLogger(__name__)


class LinkError(Exception):
    pass


def user_for(issuer: str, subject: str):
    identity = (
        SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    )
    if identity is None:
        return None
    SsoIdentity.objects.filter(pk=identity.pk).update(last_login_at=timezone.now())
    return identity.user


def linkable_by_claim(user, issuer: str) -> bool:
    """Whether a username claim may link ``user`` (step 3 above)."""
    return (
        getattr(settings, "ALLOT_OIDC_LINK_EXISTING", False)
        and user.is_active
        and not user.is_staff
        and not user.is_superuser
        and not SsoIdentity.objects.filter(user=user, issuer=issuer).exists()
    )


@transaction.atomic
def link(user, issuer: str, subject: str, *, by: str) -> SsoIdentity:
    """Link (issuer, subject) to ``user``; :class:`LinkError` when it is someone else's."""
    issuer, subject = issuer.rstrip("/"), subject
    if not issuer or not subject:
        raise LinkError("an issuer and a subject are both needed")
    existing = SsoIdentity.objects.filter(issuer=issuer, subject=subject).first()
    if existing is not None:
        if existing.user_id == user.pk:
            return existing
        raise LinkError(f"{subject} at {issuer} is already linked to {existing.user}")
    try:
        with transaction.atomic():
            identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    except IntegrityError as exc:  # linked by a concurrent sign-in
        raise LinkError(f"{subject} at {issuer} is already linked") from exc
    event(log, "sso_identity_linked", user=user.username, issuer=issuer, subject=subject, by=by)
    return identity


def refuse(reason: str, **fields) -> None:
    event(log, "sso_identity_refused", logging.WARNING, reason=reason, **fields)


def new_account(username: str, issuer: str, subject: str):
    """A new account for a new pair (step 2), or None when the username is taken."""
    User = get_user_model()
    try:
        with transaction.atomic():
            user = User.objects.create_user(username)  # no usable password
            link(user, issuer, subject, by="first sign-in")
    except (IntegrityError, LinkError):
        refuse("username taken", username=username, issuer=issuer, subject=subject)
        return None
    event(log, "sso_user_created", user=user.username)
    return user
