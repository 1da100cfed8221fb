"""Clusters, nodes and jobs. State changes go through scheduling.transitions and services."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from scheduling.querysets import JobQuerySet


class Cluster(models.Model):
    class Backend(models.TextChoices):
        SIMULATED = "simulated"
        SLURM = "slurm"
        KUBERNETES = "kubernetes"

    name = models.SlugField(max_length=64, unique=True)
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.SIMULATED)
    options = models.JSONField(default=dict, blank=True)
    gpu_type = models.CharField(max_length=100, default="H100")
    interactive_pool_gpus = models.PositiveIntegerField(default=8)
    # Backend health: set by sync/dispatch, shown on the cluster and operations pages.
    reachable = models.BooleanField(default=True)
    last_error = models.TextField(blank=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    # The scheduling-pass lock: a conditional UPDATE on these columns (works on SQLite and
    # PostgreSQL alike) so two workers never schedule the same cluster at once.
    pass_lock_token = models.CharField(max_length=64, blank=True)
    pass_lock_until = models.DateTimeField(null=True, blank=True)
    last_pass_at = models.DateTimeField(null=True, blank=True)
    last_pass_ms = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(backend__in=["simulated", "slurm", "kubernetes"]),
                name="cluster_backend_valid",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def total_gpus(self) -> int:
        return sum(node.gpus for node in self.nodes.all() if node.present)


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=128)
    gpus = models.PositiveIntegerField()
    gpu_type = models.CharField(max_length=100)
    present = models.BooleanField(default=True)  # False once rediscovery no longer sees it
    drained = models.BooleanField(default=False)
    drain_reason = models.CharField(max_length=200, blank=True)
    drain_requested_at = models.DateTimeField(null=True, blank=True)
    drain_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    drained_by = models.DateTimeField(null=True, blank=True)  # engine's latest-empty estimate

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_per_cluster")
        ]

    def __str__(self) -> str:
        return self.name


# POSIX's portable user names, as Debian's useradd accepts them; never root. \Z, not $: "$"
# also matches before a final newline, and "alice\n" is no user name.
POSIX_NAME_PATTERN = r"\A[a-z_][a-z0-9_-]{0,31}\Z"


class PosixAccount(models.Model):
    """The Unix account a user's jobs run as on Slurm and Kubernetes clusters (never Allot's
    service account). Set with ``manage.py posix_account``, in the admin, or later from SSO
    claims. ``uid``/``gid`` are needed for Kubernetes (the pod's runAsUser/runAsGroup); Slurm
    only needs the name."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="posix_account"
    )
    name = models.CharField(
        max_length=32,
        unique=True,
        validators=[
            RegexValidator(POSIX_NAME_PATTERN, "a POSIX user name: a-z, 0-9, _ and -"),
            RegexValidator(r"\Aroot\Z", "jobs never run as root", inverse_match=True),
        ],
    )
    uid = models.PositiveIntegerField(null=True, blank=True, unique=True)
    gid = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=~Q(name="root"), name="posix_account_not_root"),
            models.CheckConstraint(
                condition=Q(uid__isnull=True) | Q(uid__gt=0), name="posix_account_uid_not_root"
            ),
            models.CheckConstraint(
                condition=Q(gid__isnull=True) | Q(gid__gt=0), name="posix_account_gid_not_root"
            ),
        ]

    def __str__(self) -> str:
        ids = f" ({self.uid}:{self.gid})" if self.uid is not None else ""
        return f"{self.name}{ids}"

    def clean(self) -> None:
        from scheduling.job_accounts import refusal

        refused = refusal(self.name, self.uid)
        if refused:
            raise ValidationError({refused[0]: refused[1]})


JOB_STATES = ["pending", "running", "preempted", "completed", "failed", "cancelled"]


class Job(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        PREEMPTED = "preempted"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Kind(models.TextChoices):
        BATCH = "batch"
        INTERACTIVE = "interactive"

    TERMINAL = (State.COMPLETED, State.FAILED, State.CANCELLED)
    # What the submission chose, fixed once the job exists: read-only in the admin, echoed by
    # the API.
    SUBMITTED_FIELDS = (
        "owner",
        "project",
        "cluster",
        "gpus",
        "min_runtime_s",
        "resumable",
        "kind",
        "command",
        "env",
        "sim_duration_s",
        "priority",
    )

    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    project = models.ForeignKey(
        "budgets.BudgetNode", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="jobs")
    gpus = models.PositiveIntegerField()
    min_runtime_s = models.PositiveIntegerField()
    resumable = models.BooleanField(default=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.BATCH)
    command = models.TextField(blank=True)
    # Variables the job declares (NAME → value, checked by scheduling.job_env): the job sees
    # these besides the scheduler's own, never the worker's environment.
    env = models.JSONField(default=dict, blank=True)
    sim_duration_s = models.PositiveIntegerField(null=True, blank=True)
    priority = models.CharField(max_length=8, default="normal")  # accepted, never an input
    held = models.BooleanField(default=False)
    max_protection_s = models.PositiveIntegerField(null=True, blank=True)  # from an exception
    protection_source = models.CharField(max_length=100, default="contract")

    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)  # the current or last run
    first_started_at = models.DateTimeField(null=True, blank=True)  # for wait times
    ended_at = models.DateTimeField(null=True, blank=True)
    funded = models.BooleanField(default=False)
    protected_until = models.DateTimeField(null=True, blank=True)
    nodes = models.JSONField(default=list, blank=True)  # [[node name, gpus], ...]
    run_seconds_done = models.PositiveIntegerField(default=0)  # work kept across preemptions
    attempt = models.PositiveIntegerField(default=0)
    attempt_key = models.CharField(max_length=64, blank=True)
    external_id = models.CharField(max_length=128, blank=True)
    dispatched = models.BooleanField(default=False)  # the backend acknowledged this attempt
    last_charged_at = models.DateTimeField(null=True, blank=True)
    # Set when the budget floor ended this run's funding: charges stopped here.
    funding_ended_at = models.DateTimeField(null=True, blank=True)
    gpu_utilization = models.FloatField(null=True, blank=True)
    low_utilization_since = models.DateTimeField(null=True, blank=True)
    # GPU telemetry (scheduling/telemetry.py): when utilisation was last read, GPU-seconds
    # held below the idle threshold so far (the "wasted GPU-hours"), and when the owner was
    # told this idle spell (cleared when the job is busy again).
    utilization_at = models.DateTimeField(null=True, blank=True)
    wasted_gpu_seconds = models.BigIntegerField(default=0)
    idle_notified_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # The backend's last refusal for this job (a submit, stop or sync step that failed for this
    # job alone); shown on the job's page. Cleared by nothing: it is history, like events.
    last_error = models.TextField(blank=True)

    # Written by each scheduling pass for waiting jobs.
    pending_code = models.CharField(max_length=32, blank=True)
    pending_message = models.CharField(max_length=300, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    # Written by each pass for running jobs: the engine's explanation (see scheduling.explain).
    explanation = models.JSONField(default=dict, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["cluster", "state"]),
            models.Index(fields=["owner", "state"]),
            # The pages read the live jobs of every cluster (running overview, occupancy,
            # queue counts): a small partial index, so 100k finished jobs are never scanned.
            models.Index(
                fields=["state", "cluster"],
                condition=Q(state__in=["pending", "running", "preempted"]),
                name="job_active_by_state",
            ),
            # The operations page's wait times: jobs first started in the last 7 days.
            models.Index(fields=["first_started_at"], name="job_first_started"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=JOB_STATES), name="job_state_valid"),
            models.CheckConstraint(condition=Q(gpus__gte=1), name="job_gpus_positive"),
            models.CheckConstraint(
                condition=Q(kind__in=["batch", "interactive"]), name="job_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL


class Reservation(models.Model):
    """Capacity the scheduler holds on a cluster for a project's run, from ``starts_at`` to
    ``ends_at``. The scheduler owns it; the exceptions workflow writes one when it approves a
    reservation request and ends it when the request expires (``source`` cites it)."""

    ref = models.CharField(max_length=64, unique=True)  # the engine's id, e.g. "exception-12"
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="reservations")
    project = models.ForeignKey(
        "budgets.BudgetNode", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpus = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    source = models.CharField(max_length=100, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["starts_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")), name="reservation_ordered"
            )
        ]

    def __str__(self) -> str:
        return f"{self.ref}: {self.gpus} GPUs on {self.cluster}"


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=32)
    message = models.CharField(max_length=400, blank=True)
    nodes = models.JSONField(default=list, blank=True)
    # On a preemption: the GPU-seconds of work it cost by the preemption cost model
    # (scheduling/preemption_cost.py), known at that moment, so the operations page and
    # /metrics sum a window of them in one aggregate query.
    lost_gpu_seconds = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]
        # Preemptions in the last 24 h (operations page), displacements (each pass's snapshot).
        indexes = [models.Index(fields=["kind", "at"], name="jobevent_kind_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind}"


class OperationStat(models.Model):
    """One bucket of a latency histogram of the live loop (pass, dispatch, reconcile, charge),
    per cluster, written by the Celery workers and read by ``/metrics`` (portal/metrics.py).

    In the database rather than in process memory: the workers that time the operations are
    not the web processes that answer the scrape, and a worker restart must not reset a
    counter. Buckets are cumulative (``le`` is the upper bound, null for +Inf), so one
    conditional ``UPDATE … WHERE le >= value`` records an observation in one statement; the
    +Inf row (``le`` = ``INF_LE``, a finite stand-in both databases compare alike) holds the
    histogram's totals: ``count``, ``sum_seconds`` and ``errors``."""

    INF_LE = 1e300

    operation = models.CharField(max_length=32)
    cluster = models.CharField(max_length=64, blank=True)
    le = models.FloatField()
    count = models.BigIntegerField(default=0)
    sum_seconds = models.FloatField(default=0.0)
    errors = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["operation", "cluster", "le"]
        constraints = [
            models.UniqueConstraint(
                fields=["operation", "cluster", "le"],
                name="operation_stat_bucket_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.cluster} le={self.le}: {self.count}"


class LedgerCheck(models.Model):
    """The last periodic ledger check of a cluster (scheduling/ledger_check.py), which
    /operations and ``/metrics`` show. One row per cluster, replaced by each run: the check
    looks over a window, so its latest answer is the one that matters."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, primary_key=True, related_name="ledger_check"
    )
    # The last run the backend answered; the counts below are that run's.
    checked_at = models.DateTimeField(null=True, blank=True)
    since = models.DateTimeField(null=True, blank=True)
    differences = models.PositiveIntegerField(default=0)
    # Sum of |charged − backend| over the differences: an overcharge on one attempt and an
    # undercharge on another do not cancel out.
    gap_gpu_seconds = models.BigIntegerField(default=0)
    # The largest differences: [{"job_id", "job_name", "attempt_key", "charged_gpu_s",
    # "backend_gpu_s"}], so the page links them without a query of its own.
    worst = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)  # why the last run got no answer; "" when it did

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.differences} differences"

    @property
    def gap_gpu_hours(self) -> float:
        return self.gap_gpu_seconds / 3600

    def worst_attempts(self) -> list[dict]:
        """``worst`` in GPU-hours; the gap is signed: positive when Allot charged more."""
        return [
            {
                **w,
                "charged_gpu_hours": w["charged_gpu_s"] / 3600,
                "backend_gpu_hours": w["backend_gpu_s"] / 3600,
                "gap_gpu_hours": (w["charged_gpu_s"] - w["backend_gpu_s"]) / 3600,
            }
            for w in self.worst
        ]
