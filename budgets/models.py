"""The budget tree, its grants, the usage ledger, liens, roles and the audit trail.

Rows here are written only by `budgets.services`; reads that span many nodes go through
`budgets.balances`, which batches the arithmetic into a few grouped queries.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from treebeard.mp_tree import MP_Node


class RoleKind(models.TextChoices):
    LEADERSHIP = "leadership", "Leadership"
    PROGRAM_MANAGER = "program_manager", "Program manager"
    PROJECT_LEAD = "project_lead", "Project lead"
    RESEARCHER = "researcher", "Researcher"
    CLUSTER_ADMIN = "cluster_admin", "Cluster admin"


class AuditAction(models.TextChoices):
    SET_GRANT = "set_grant", "Set grant"
    TRANSFER = "transfer", "Transfer"
    SET_WEIGHT = "set_weight", "Set weight"
    CREATE = "create", "Create"
    RENAME = "rename", "Rename"
    MOVE = "move", "Move"
    ARCHIVE = "archive", "Archive"
    GRANT_ROLE = "grant_role", "Grant role"
    REVOKE_ROLE = "revoke_role", "Revoke role"
    SET_PRICE = "set_price", "Set GPU price"


class BudgetNode(MP_Node):
    """One node of the organisation tree: the root, a program, a project, or deeper.

    treebeard's materialised path (`path`, four characters a level) makes "this node and all
    its descendants" a single `path LIKE 'prefix%'` — which is what balances roll up over.
    The human path (`nlp/olmo`) is `slug_path`, stored so that a job submission can find its
    project with one indexed lookup; services keep it in step on rename and move.
    """

    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60)
    slug_path = models.CharField(max_length=500, unique=True, blank=True)
    weight = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="Overrides the grant as this node's share among its siblings.",
    )
    archived = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(weight__isnull=True) | models.Q(weight__gte=0),
                name="budgetnode_weight_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.slug_path or self.name

    @property
    def label(self) -> str:
        """The path shown to people: the slug path, or the name for the root."""
        return self.slug_path or self.name


class GpuType(models.Model):
    """A GPU model and what one hour of it costs, in H100-equivalent GPU-hours."""

    name = models.CharField(max_length=40, unique=True)
    cost_factor = models.DecimalField(max_digits=6, decimal_places=3, default=Decimal("1.000"))

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(cost_factor__gt=0), name="gputype_cost_factor_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (×{self.cost_factor})"


class Grant(models.Model):
    """GPU-hours (cost-normalised) granted to a node for the period starting `period_start`.

    A grant stands until changed: the grant in force for a period is the latest row at or
    before it, so a quarter does not start with every budget at zero. `version` increments on
    every change and is what optimistic concurrency compares.
    """

    node = models.ForeignKey(BudgetNode, on_delete=models.PROTECT, related_name="grants")
    period_start = models.DateField()
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=2)
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "period_start"], name="grant_one_per_period"),
            models.CheckConstraint(condition=models.Q(gpu_hours__gte=0), name="grant_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.node}: {self.gpu_hours} GPU-h from {self.period_start}"


class UsageEntry(models.Model):
    """One charged interval of one job: the append-only ledger balances derive from.

    `job_ref` is the scheduling Job id (kept as a plain integer so the ledger survives job
    clean-up). (job_ref, interval_start) is unique among charges, so charging the same interval
    twice — a retried task, two workers — records it once.

    A charge that proves too long (the job had ended during a backend outage) is never edited
    or deleted: a reversal row (`reverses` set, amounts negative or zero, the same interval so
    windows and periods net out exactly) gives the excess back. At most one per charge.
    """

    node = models.ForeignKey(BudgetNode, on_delete=models.PROTECT, related_name="usage")
    job_ref = models.BigIntegerField(null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT)
    interval_start = models.DateTimeField()
    interval_end = models.DateTimeField()
    gpu_seconds = models.BigIntegerField()
    cost_gpu_seconds = models.BigIntegerField()
    reverses = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="reversal"
    )
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "usage entries"
        constraints = [
            models.UniqueConstraint(
                fields=["job_ref", "interval_start"],
                condition=models.Q(reverses__isnull=True),
                name="usage_once_per_job_interval",
            ),
            models.CheckConstraint(
                condition=models.Q(interval_end__gte=models.F("interval_start")),
                name="usage_interval_ordered",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(reverses__isnull=True, gpu_seconds__gte=0, cost_gpu_seconds__gte=0)
                    | models.Q(reverses__isnull=False, gpu_seconds__lte=0, cost_gpu_seconds__lte=0)
                ),
                name="usage_sign_matches_kind",
            ),
        ]
        indexes = [models.Index(fields=["interval_start", "node"], name="usage_by_time_node")]

    def __str__(self) -> str:
        return f"{self.node} job {self.job_ref}: {self.cost_gpu_seconds} cost-GPU-s"


class Lien(models.Model):
    """Funds set aside for a started job's protected window, until usage is charged.

    `charged_gpu_seconds` grows as the job's intervals are charged, so what is still held is
    `cost - charged` (never below zero) and nothing is counted twice.
    """

    node = models.ForeignKey(BudgetNode, on_delete=models.PROTECT, related_name="liens")
    job_ref = models.BigIntegerField(unique=True)
    cost_gpu_seconds = models.PositiveBigIntegerField()
    charged_gpu_seconds = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        state = "released" if self.released_at else "open"
        return f"lien job {self.job_ref} on {self.node}: {self.cost_gpu_seconds} ({state})"


class Role(models.Model):
    """Who may see and change which part of the tree. Scope rules live in `budgets.access`."""

    Kind = RoleKind

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget_roles"
    )
    node = models.ForeignKey(
        BudgetNode, null=True, blank=True, on_delete=models.CASCADE, related_name="roles"
    )
    role = models.CharField(max_length=20, choices=Kind.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "node", "role"], name="role_unique"),
            models.CheckConstraint(condition=models.Q(role__in=RoleKind.values), name="role_known"),
            models.CheckConstraint(
                condition=models.Q(role="cluster_admin") | models.Q(node__isnull=False),
                name="role_scoped_to_a_node",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} @ {self.node or 'cluster'}"


class AuditEntry(models.Model):
    """Who changed what, when, from what to what, and why. Written with the change itself."""

    Action = AuditAction

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    at = models.DateTimeField(auto_now_add=True)
    action = models.CharField(max_length=20, choices=Action.choices)
    node = models.ForeignKey(BudgetNode, on_delete=models.PROTECT, related_name="audit")
    field = models.CharField(max_length=40)
    old = models.TextField(blank=True)
    new = models.TextField(blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(action__in=AuditAction.values),
                name="audit_action_known",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.node}"
