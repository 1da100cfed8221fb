import logging.config
import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("allot")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.celeryd_init.connect
@signals.beat_init.connect
def refuse_without_a_secret_key(**kwargs):
    """A worker or beat with DEBUG off and no SECRET_KEY stops before its first task. SystemExit,
    because Celery logs and carries on past any Exception a signal receiver raises."""
    from django.core.exceptions import ImproperlyConfigured

    from portal.secret import require_secret_key

    try:
        require_secret_key()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"ImproperlyConfigured: {exc}") from None


@signals.celeryd_init.connect  # early: Celery warns (running as root...) before setup_logging
@signals.setup_logging.connect
def use_allot_logging(**kwargs):
    """Workers and beat log through settings.LOGGING, like the web: Celery installs its own
    handlers and format unless a receiver of this signal configures logging, so with it their
    lines (Celery's own included) are JSON under LOG_FORMAT=json, with the task's id and name."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    logging.captureWarnings(True)  # Celery's start-up warnings too, as log records
    # A worker's or beat's own --loglevel (Celery's default: WARNING) still sets how much it
    # says, as in any Celery app; LOG_LEVEL sets the web's.
    level = kwargs.get("loglevel") or (kwargs.get("options") or {}).get("loglevel")
    if level:
        logging.getLogger().setLevel(level if isinstance(level, int) else str(level).upper())
