"""Celery tasks: take ids, re-fetch, call a service; safe to run twice."""

from celery import shared_task

from whatif import services


@shared_task(ignore_result=True)
def run_preview(preview_id: int) -> None:
    services.run_preview(preview_id)
