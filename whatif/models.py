"""A what-if preview: a proposed set of grants replayed against the organisation's recent
workload beside the current grants. Written only by ``whatif.services``; it never touches a
grant (``apply_proposal`` goes through the budget services)."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class Workload(models.Model):
    """One export of the records (``whatif.export``), kept by digest so two previews of the
    same workload share it and the task reads exactly what the request saw."""

    digest = models.CharField(max_length=64, unique=True)
    weeks = models.PositiveSmallIntegerField()
    as_of = models.DateTimeField()
    data = models.JSONField()  # {"scenario": {...}, "trace": "<csv>", "grants", "weights", ...}
    jobs = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.weeks} weeks to {self.as_of:%Y-%m-%d %H:%M} ({self.jobs} jobs)"


class Preview(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="previews")
    grants = models.JSONField()  # the proposal: path -> GPU-hours (strings, exact decimals)
    cache_key = models.CharField(max_length=64, db_index=True)  # workload digest + proposal
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)  # {"current": {...}, "proposed": {...}}
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["queued", "running", "done", "failed"]),
                name="whatif_preview_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0) & Q(progress__lte=1),
                name="whatif_preview_progress_0_1",
            ),
        ]

    def __str__(self) -> str:
        return f"what-if #{self.pk} ({self.status})"
