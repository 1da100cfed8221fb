"""Exception requests, their approvals, their history and the in-app notifications.

State changes go through `exceptions.workflow.transition` only; every other write goes
through `exceptions.services`.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q


class Kind(models.TextChoices):
    EXTENDED_PROTECTION = "extended_protection", "Extended protection"
    BUDGET_TOPUP = "budget_topup", "Budget top-up"
    RESERVATION = "reservation", "Reservation"


class State(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn"
    ACTIVE = "active", "Active"
    EXPIRED = "expired", "Expired"


OPEN_STATES = (State.SUBMITTED, State.APPROVED, State.ACTIVE)


class ExceptionRequestQuerySet(models.QuerySet):
    def for_list(self):
        """What the inbox, the API list and the report read for each row: no query per row."""
        return self.select_related(
            "requester", "job", "node", "cluster", "program", "decided_by"
        ).prefetch_related("approvals__approver")

    def pending(self):
        return self.filter(state=State.SUBMITTED)


class ExceptionRequest(models.Model):
    """One request to bend a rule. Kind-specific targets are nullable columns (a CheckConstraint
    keeps each kind's required ones present) rather than a JSON blob, so the engine input and
    the report are plain indexed queries."""

    Kind = Kind
    State = State

    kind = models.CharField(max_length=24, choices=Kind.choices)
    state = models.CharField(max_length=12, choices=State.choices, default=State.SUBMITTED)
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="exception_requests"
    )
    justification = models.TextField()

    # extended_protection
    job = models.ForeignKey(
        "scheduling.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    hours = models.DecimalField(max_digits=7, decimal_places=2, null=True, blank=True)
    # budget_topup (node, gpu_hours); reservation (cluster, gpus, starts_at, ends_at, node)
    node = models.ForeignKey(
        "budgets.BudgetNode", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    cluster = models.ForeignKey(
        "scheduling.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpus = models.PositiveIntegerField(null=True, blank=True)

    # The scope the approvers are resolved from (a project or deeper; empty for unfunded work)
    # and its program, kept for the per-program report.
    scope = models.ForeignKey(
        "budgets.BudgetNode", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    program = models.ForeignKey(
        "budgets.BudgetNode", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    # The effect window: a reservation's requested window; for the others, from activation
    # to the expiry the services set (the period's end for a top-up).
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)

    approvals_required = models.PositiveSmallIntegerField(default=1)
    escalation_level = models.PositiveSmallIntegerField(default=0)
    escalated_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    # What the effect changed, so expiry can undo exactly that (e.g. grants raised, per node).
    effect = models.JSONField(default=dict, blank=True)

    objects = ExceptionRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "kind"], name="exception_state_kind"),
            models.Index(fields=["cluster", "state"], name="exception_cluster_state"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=Kind.values), name="exception_kind_known"),
            models.CheckConstraint(
                condition=Q(state__in=State.values), name="exception_state_known"
            ),
            models.CheckConstraint(
                condition=~Q(kind="extended_protection") | Q(hours__gt=0),
                name="exception_protection_has_hours",
            ),
            models.CheckConstraint(
                condition=~Q(kind="budget_topup") | Q(node__isnull=False, gpu_hours__gt=0),
                name="exception_topup_has_node_and_hours",
            ),
            models.CheckConstraint(
                condition=~Q(kind="reservation")
                | Q(cluster__isnull=False, gpus__gte=1, ends_at__gt=models.F("starts_at")),
                name="exception_reservation_has_window",
            ),
            models.CheckConstraint(
                condition=Q(approvals_required__gte=1), name="exception_needs_an_approval"
            ),
        ]

    def __str__(self) -> str:
        return f"exception #{self.pk} {self.kind} ({self.state})"

    @property
    def source(self) -> str:
        """How the effect cites this request (a job's protection source, an audit reason)."""
        return f"exception #{self.pk}"

    @property
    def target_label(self) -> str:
        if self.kind == Kind.EXTENDED_PROTECTION:
            return (
                f"job #{self.job_id} for {self.hours_label} h" if self.job_id else "a deleted job"
            )
        if self.kind == Kind.BUDGET_TOPUP:
            return f"{self.node} +{self.gpu_hours:,} GPU-hours"
        project = f" for {self.node}" if self.node_id else ""
        return f"{self.gpus} GPUs on {self.cluster}{project}"

    @property
    def hours_label(self) -> str:
        return f"{self.hours.normalize():f}" if self.hours is not None else ""

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES


class Approval(models.Model):
    """One approver's yes. Large asks need two from distinct people: the unique constraint makes
    a double click (or a retried request) count once."""

    request = models.ForeignKey(
        ExceptionRequest, on_delete=models.CASCADE, related_name="approvals"
    )
    approver = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    tier = models.CharField(max_length=20)
    at = models.DateTimeField()
    comment = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["request", "approver"], name="approval_once_per_person")
        ]

    def __str__(self) -> str:
        return f"#{self.request_id} approved by {self.approver_id} ({self.tier})"


class ExceptionEvent(models.Model):
    """The request's history: every transition, approval, escalation and effect, with who."""

    request = models.ForeignKey(ExceptionRequest, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=20)  # a state name, or approval / escalation / effect
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"#{self.request_id} {self.kind} at {self.at:%Y-%m-%d %H:%M}"


class Notification(models.Model):
    """An in-app message; the unread ones make the inbox badge."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="exception_notifications"
    )
    request = models.ForeignKey(
        ExceptionRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    event = models.CharField(max_length=20)
    message = models.CharField(max_length=400)
    created_at = models.DateTimeField()
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "read_at"], name="notification_unread")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.message}"
