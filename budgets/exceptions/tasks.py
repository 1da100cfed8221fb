"""Periodic exception housekeeping (beat: every 60 s)."""

from celery import shared_task


@shared_task(name="budgets.exceptions.tasks.housekeeping")
def housekeeping() -> dict:
    return {}
