"""What a sign-in copies from the provider's claims: name and e-mail, and the POSIX account."""

import logging

from django.conf import settings

from core.logs import event

log = logging.getLogger(__name__)
PROFILE = {"email": "email", "given_name": "first_name", "family_name": "last_name"}


def sync_profile(user, claims) -> None:
    changed = []
    for claim, field in PROFILE.items():
        value = str(claims.get(claim) or "")[: user._meta.get_field(field).max_length]
        if value and getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    if changed:
        user.save(update_fields=changed)


def _int_claim(claims, name: str) -> int | None:
    if not name or claims.get(name) in (None, ""):
        return None
    try:
        return int(claims[name])
    except (TypeError, ValueError):
        return None


def sync_posix_account(user, claims) -> None:
    """Set the account jobs run as from ``ALLOT_OIDC_POSIX_CLAIM`` (and the uid and gid
    claims) when the provider sends one; a claim that is absent changes nothing, one that
    cannot be an account is logged and leaves the old account in place."""
    from scheduling.errors import JobValidationError
    from scheduling.identity import account_of, set_account

    claim = settings.ALLOT_OIDC_POSIX_CLAIM
    name = str(claims.get(claim) or "") if claim else ""
    if not name:
        return
    uid = _int_claim(claims, settings.ALLOT_OIDC_UID_CLAIM)
    gid = _int_claim(claims, settings.ALLOT_OIDC_GID_CLAIM)
    current = account_of(user)
    if current and (current.name, current.uid, current.gid) == (name, uid, gid):
        return
    try:
        set_account(user, name, uid, gid)
    except JobValidationError as exc:
        event(log, "sso_posix_refused", logging.WARNING, user=user.username, posix=name,
              reason=exc.message)  # fmt: skip
        return
    event(log, "sso_posix_set", user=user.username, posix=name, uid=uid, gid=gid)
