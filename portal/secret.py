"""What signs needs the secret key: the web (sessions, CSRF, password reset links) and the
workers and beat (the dispatcher's backend tags, scheduling/dispatch.py). They refuse to start
without one when DEBUG is off. Settings leave an unset key empty rather than failing, so a
management command that serves nothing and stores no session (simulate, migrate, check) runs
without one; Django itself refuses any other use of an empty key.
"""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

MISSING = "SECRET_KEY must be set to a secret value when DEBUG is off (DEBUG=1 for development)"


def require_secret_key() -> None:
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django's own refusal of an empty key
        key = ""
    if not key:
        raise ImproperlyConfigured(MISSING)


def check_secret_key(app_configs=None, **kwargs):
    """``check --deploy``: the key the web and the workers will ask for at start."""
    from django.core.checks import Error

    try:
        require_secret_key()
    except ImproperlyConfigured:
        return [Error(MISSING, hint="or SECRET_KEY_FILE", id="allot.E001")]
    return []
