"""Django admin for operators: read-mostly. Job state changes only through the services
(cancel), drains only through ``set_node_drain``, so every change lands in a timeline or
in the drain's requester fields — never a direct edit of a state column."""

from django import forms
from django.contrib import admin, messages

from scheduling import discovery, enqueue, services
from scheduling.backends.base import BackendError, get_backend
from scheduling.errors import JobError
from scheduling.models import Cluster, Job, JobEvent, Node, PosixAccount

JOB_STATE_FIELDS = (
    "state",
    "submitted_at",
    "started_at",
    "ended_at",
    "funded",
    "protected_until",
    "nodes",
    "run_seconds_done",
    "attempt",
    "attempt_key",
    "external_id",
    "dispatched",
    "last_charged_at",
    "gpu_utilization",
    "low_utilization_since",
    "utilization_at",
    "wasted_gpu_seconds",
    "idle_notified_at",
    "exit_code",
    "last_error",
    "pending_code",
    "pending_message",
    "queue_position",
    "estimated_start",
    "explanation",
    "max_protection_s",
    "protection_source",
)


class NodeInline(admin.TabularInline):
    model = Node
    fields = ("name", "gpus", "gpu_type", "present", "drained", "drain_reason", "drained_by")
    readonly_fields = ("drained", "drain_reason", "drained_by")
    extra = 0


class ClusterForm(forms.ModelForm):
    """Registering a cluster in the admin checks its options here (file options inside
    ALLOT_CLUSTER_FILES_DIR, an ssh command_prefix, values the backend accepts) without
    contacting it; discovery runs in a worker, with a time limit, never in the web process."""

    class Meta:
        model = Cluster
        fields = ("name", "backend", "options", "interactive_pool_gpus")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        options = data.get("options") or {}
        try:
            discovery.check_options(data["backend"], options)
            get_backend(data["backend"], data["name"], options)  # parses, contacts nothing
        except JobError as exc:
            raise forms.ValidationError({exc.field or "options": exc.message}) from exc
        except BackendError as exc:
            raise forms.ValidationError({"options": f"invalid options: {exc}"}) from exc
        return data


def rediscover_nodes(modeladmin, request, queryset):
    for cluster in queryset:
        enqueue.discover(cluster.pk)
        modeladmin.message_user(request, _queued(cluster))


def _queued(cluster) -> str:
    return (
        f"{cluster.name}: discovery queued; a worker asks the backend and its nodes (or the "
        "error, under Last error) appear here"
    )


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterForm
    list_display = ("name", "backend", "gpu_type", "reachable", "last_pass_at", "last_pass_ms")
    readonly_fields = (
        "gpu_type",
        "reachable",
        "last_error",
        "last_sync_at",
        "pass_lock_token",
        "pass_lock_until",
        "last_pass_at",
        "last_pass_ms",
    )
    inlines = [NodeInline]
    actions = [rediscover_nodes]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        enqueue.discover(obj.pk)
        self.message_user(request, _queued(obj))


def _drain(modeladmin, request, queryset, drained):
    for node in queryset:
        try:
            services.set_node_drain(request.user, node.pk, drained, "drained from the admin")
        except JobError as exc:
            modeladmin.message_user(request, f"{node}: {exc.message}", messages.ERROR)


@admin.action(description="Drain selected nodes")
def drain_nodes(modeladmin, request, queryset):
    _drain(modeladmin, request, queryset, True)


@admin.action(description="Return selected nodes to service")
def undrain_nodes(modeladmin, request, queryset):
    _drain(modeladmin, request, queryset, False)


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "cluster", "gpus", "gpu_type", "present", "drained", "drained_by")
    list_filter = ("cluster", "drained", "present")
    readonly_fields = (
        "drained",
        "drain_reason",
        "drain_requested_at",
        "drain_requested_by",
        "drained_by",
    )
    actions = [drain_nodes, undrain_nodes]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    fields = ("at", "kind", "message", "nodes")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.action(description="Cancel selected jobs")
def cancel_jobs(modeladmin, request, queryset):
    for job in queryset:
        try:
            services.cancel_job(request.user, job.pk)
        except JobError as exc:
            modeladmin.message_user(request, f"{job}: {exc.message}", messages.ERROR)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "owner",
        "project",
        "cluster",
        "gpus",
        "state",
        "funded",
        "queue_position",
        "submitted_at",
    )
    list_filter = ("state", "cluster", "funded", "kind")
    search_fields = ("name", "owner__username", "project__slug_path")
    list_select_related = ("owner", "project", "cluster")
    readonly_fields = (*Job.SUBMITTED_FIELDS, "held", *JOB_STATE_FIELDS)
    inlines = [JobEventInline]
    actions = [cancel_jobs]

    def has_add_permission(self, request):
        return False  # jobs are submitted through the portal or the API, which validate them


@admin.register(PosixAccount)
class PosixAccountAdmin(admin.ModelAdmin):
    """The Unix account each user's jobs run as (also ``manage.py posix_account``)."""

    list_display = ("user", "name", "uid", "gid", "updated_at")
    search_fields = ("user__username", "name")
    raw_id_fields = ("user",)
