"""Periodic exception housekeeping (beat: "exceptions-housekeeping", every 60 s).

Each step lists the ids that look due, then calls a per-id service that locks the row and
re-checks before changing anything — so two workers, or a retried run, change each request
once.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db.models import Q
from django.utils import timezone

logger = logging.getLogger(__name__)


def _each(ids, service, now) -> int:
    """Run `service` per id; one request failing is logged and retried next run, and does not
    hold up the others."""
    done = 0
    for pk in list(ids):
        try:
            done += bool(service(pk, now=now))
        except Exception:  # noqa: BLE001
            logger.exception("%s failed for exception #%s", service.__name__, pk)
    return done


def activate_due(now) -> int:
    from exceptions.models import ExceptionRequest, State
    from exceptions.services import activate_exception

    ids = ExceptionRequest.objects.filter(
        Q(starts_at__isnull=True) | Q(starts_at__lte=now), state=State.APPROVED
    ).values_list("pk", flat=True)
    return _each(ids, activate_exception, now)


def expire_due(now) -> int:
    from exceptions.models import ExceptionRequest, Kind, State
    from exceptions.services import expire_exception

    # Protections also end with their job, whatever their end time: look at all of them.
    ids = ExceptionRequest.objects.filter(
        Q(ends_at__lte=now) | Q(kind=Kind.EXTENDED_PROTECTION), state=State.ACTIVE
    ).values_list("pk", flat=True)
    return _each(ids, expire_exception, now)


def escalate_due(now) -> int:
    from datetime import timedelta

    from exceptions.approvers import escalate_after_h
    from exceptions.models import ExceptionRequest, State
    from exceptions.services import escalate_exception

    cutoff = now - timedelta(hours=escalate_after_h())
    ids = ExceptionRequest.objects.filter(
        Q(escalated_at__lte=cutoff) | Q(escalated_at__isnull=True, submitted_at__lte=cutoff),
        state=State.SUBMITTED,
        escalation_level=0,  # every ladder has two tiers
    ).values_list("pk", flat=True)
    return _each(ids, escalate_exception, now)


@shared_task(name="exceptions.tasks.housekeeping", ignore_result=True)
def housekeeping() -> dict:
    """Activate approved requests whose start has come, expire active ones past their end,
    escalate stale ones. A failure on one request is logged and does not stop the others."""
    now = timezone.now()
    return {
        "activated": activate_due(now),
        "expired": expire_due(now),
        "escalated": escalate_due(now),
    }
