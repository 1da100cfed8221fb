from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.representation import PlannedRepresentation
from scheduling import job_env
from scheduling.access import can_see_command
from scheduling.errors import JobValidationError
from scheduling.models import Cluster, Job, Node

MAX_COMMAND = 10_000  # the page's form and the API alike


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string", "maxLength": 4096}}
)
class EnvField(serializers.JSONField):
    """NAME → value, checked whole by scheduling.job_env, so every refusal (a NUL byte too)
    is one message on ``env`` naming the variable."""


class JobSubmitSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    project = serializers.CharField(
        allow_blank=True,
        default="",
        max_length=500,
        help_text="Budget path such as nlp/olmo; empty = unfunded",
    )
    cluster = serializers.CharField(max_length=64)
    gpus = serializers.IntegerField(min_value=1, max_value=100_000)
    min_runtime_s = serializers.IntegerField(min_value=60, max_value=10**7)
    resumable = serializers.BooleanField(default=True)
    kind = serializers.ChoiceField(choices=Job.Kind.values, default="batch")
    command = serializers.CharField(allow_blank=True, default="", max_length=MAX_COMMAND)
    sim_duration_s = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=10**9
    )
    priority = serializers.ChoiceField(
        choices=["low", "normal", "high", "urgent"], default="normal"
    )
    env = EnvField(
        default=dict,
        help_text="Variables the job sees, NAME: value (at most 64, values up to 4 KiB; names "
        "starting ALLOT_, SLURM_, SBATCH_, SRUN_, SALLOC_, KUBERNETES_ and a few the platform "
        "sets are refused). Nothing of Allot's own environment reaches a job.",
    )

    def validate_env(self, value):
        try:
            return job_env.check_env(value)
        except JobValidationError as exc:
            raise serializers.ValidationError(exc.message) from None


class JobSerializer(PlannedRepresentation, serializers.ModelSerializer):
    """A job as the API shows it: the answer to every submission and each job of a list, so
    its fields are resolved once per process (``core.representation``)."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    project = serializers.SerializerMethodField()
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    pending_reason = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    command = serializers.SerializerMethodField()
    env = serializers.SerializerMethodField()
    protection_request = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            *Job.SUBMITTED_FIELDS,
            "state",
            "submitted_at",
            "started_at",
            "ended_at",
            "funded",
            "protected_until",
            "protection_source",
            "queue_position",
            "pending_reason",
            "estimated_start",
            "nodes",
            "attempt",
            "gpu_utilization",
            "funding_ended_at",
            "protection_request",
            "last_error",  # the cluster's last refusal for this job alone
        ]
        read_only_fields = fields

    @extend_schema_field(
        serializers.CharField(
            allow_null=True,
            help_text="Shown to the job's owner, its project's leads and cluster admins; null "
            "for anyone else.",
        )
    )
    def get_command(self, job) -> str | None:
        request = self.context.get("request")
        if request is None or not can_see_command(request.user, job):
            return None
        return job.command

    @extend_schema_field(
        serializers.DictField(
            child=serializers.CharField(),
            allow_null=True,
            help_text="The job's declared variables; shown to whoever may see its command, "
            "null for anyone else (values may be credentials).",
        )
    )
    def get_env(self, job) -> dict | None:
        request = self.context.get("request")
        if request is None or not can_see_command(request.user, job):
            return None
        return dict(job.env or {})

    @extend_schema_field(serializers.CharField(allow_blank=True))
    def get_project(self, job) -> str:
        return job.project.slug_path if job.project_id else ""

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_pending_reason(self, job):
        if job.state != Job.State.PENDING:
            return None
        return {"code": job.pending_code, "message": job.pending_message}

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_protection_request(self, job) -> str | None:
        """Where to ask for the protection a min runtime above the cap needs."""
        from scheduling.services import protection_request_url

        return protection_request_url(job)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_nodes(self, job) -> list[str]:
        return [name for name, _ in job.nodes]


class NodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "gpus",
            "gpu_type",
            "present",
            "drained",
            "drain_reason",
            "drain_requested_at",
            "drained_by",
        ]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer):
    nodes = NodeSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "backend",
            "gpu_type",
            "interactive_pool_gpus",
            "reachable",
            "last_error",
            "last_sync_at",
            "last_pass_at",
            "last_pass_ms",
            "nodes",
        ]
        read_only_fields = fields


class DrainSerializer(serializers.Serializer):
    drained = serializers.BooleanField(default=True)
    reason = serializers.CharField(allow_blank=True, default="", max_length=200)
