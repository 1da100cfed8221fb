"""Tell people: an in-app notification (the inbox badge counts the unread ones) and an email
through Django's mail backend (the console in the demo), on request, decision, escalation
and expiry.

Emails go out on commit: a decision that rolls back (its effect failed) must not have told
anyone it happened. The in-app rows are written in the transaction, so they roll back with it.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from exceptions.models import ExceptionRequest, Notification

logger = logging.getLogger(__name__)


def _link(request: ExceptionRequest) -> str:
    base = getattr(settings, "ALLOT_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    return base + reverse("exception-detail", args=[request.pk])


def notify(users, request: ExceptionRequest, event: str, message: str) -> int:
    """Notify each distinct user once; returns how many were notified."""
    people = {u.pk: u for u in users if u is not None}
    if not people:
        return 0
    now = timezone.now()
    Notification.objects.bulk_create(
        Notification(user=u, request=request, event=event, message=message[:400], created_at=now)
        for u in people.values()
    )
    recipients = sorted({u.email for u in people.values() if u.email})
    if recipients:
        subject = f"[Allot] Exception #{request.pk}: {event}"
        body = (
            f"{message}\n\n{request.target_label}\n"
            f"Justification: {request.justification}\n\n{_link(request)}\n"
        )
        transaction.on_commit(lambda: _send(subject, body, recipients))
    return len(people)


def _send(subject, body, recipients) -> None:
    # A mail server that is down must not undo a committed decision; it is logged instead.
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)
    except Exception:  # noqa: BLE001
        logger.exception("could not email %s about %s", recipients, subject)


def unread_count(user) -> int:
    if user is None or not user.is_authenticated:
        return 0
    return Notification.objects.filter(user=user, read_at__isnull=True).count()


def recent(user, limit: int = 20):
    return Notification.objects.filter(user=user).select_related("request")[:limit]


def mark_read(user, ids=None) -> int:
    unread = Notification.objects.filter(user=user, read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=ids)
    return unread.update(read_at=timezone.now())


def badge(request) -> dict:
    """Context processor: `exceptions_unread` for the nav's inbox badge."""
    return {"exceptions_unread": unread_count(getattr(request, "user", None))}
