"""Portal housekeeping run by beat."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone
from knox.models import AuthToken


@shared_task
def sweep_expired_tokens() -> int:
    """Delete the API tokens past their expiry (authentication refuses them already); returns
    how many."""
    deleted, _ = AuthToken.objects.filter(expiry__lt=timezone.now()).delete()
    return deleted
