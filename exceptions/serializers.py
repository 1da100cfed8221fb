from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.parsing import MAX_DB_INT
from exceptions.models import ExceptionRequest, Kind


def _optional(field_class, help_text=None, **kwargs):
    """A field one kind needs and the others leave out (absent or null)."""
    return field_class(required=False, allow_null=True, help_text=help_text, **kwargs)


class ExceptionCreateSerializer(serializers.Serializer):
    """The shape of a request; what each kind needs is checked by the service, which names the
    field at fault."""

    kind = serializers.ChoiceField(choices=Kind.values)
    justification = serializers.CharField(allow_blank=True, default="", max_length=4000)
    job = _optional(
        serializers.IntegerField,
        "extended_protection: the job's id",
        min_value=1,
        max_value=MAX_DB_INT,
    )
    hours = _optional(
        serializers.DecimalField,
        "extended_protection: protected hours from each start",
        max_digits=7,
        decimal_places=2,
    )
    node = _optional(
        serializers.CharField,
        "budget_topup (or a reservation's project): id or path",
        allow_blank=True,
        max_length=500,
    )
    gpu_hours = _optional(
        serializers.DecimalField, "budget_topup: extra GPU-hours", max_digits=14, decimal_places=2
    )
    cluster = _optional(
        serializers.CharField, "reservation: cluster name or id", allow_blank=True, max_length=64
    )
    gpus = _optional(serializers.IntegerField, min_value=1, max_value=1_000_000)
    start = _optional(serializers.DateTimeField)
    end = _optional(serializers.DateTimeField)


class DecisionSerializer(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True, default="", max_length=4000)
    comment = serializers.CharField(allow_blank=True, default="", max_length=4000)


class ExceptionSerializer(serializers.ModelSerializer):
    requester = serializers.CharField(source="requester.username", read_only=True)
    node = serializers.SerializerMethodField()
    cluster = serializers.CharField(source="cluster.name", read_only=True, default=None)
    program = serializers.SerializerMethodField()
    start = serializers.DateTimeField(source="starts_at", read_only=True)
    end = serializers.DateTimeField(source="ends_at", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None)
    approvals = serializers.SerializerMethodField()
    reason = serializers.CharField(source="decision_reason", read_only=True)

    class Meta:
        model = ExceptionRequest
        fields = [
            "id",
            "kind",
            "state",
            "requester",
            "justification",
            "job",
            "hours",
            "node",
            "gpu_hours",
            "cluster",
            "gpus",
            "start",
            "end",
            "program",
            "approvals_required",
            "approvals",
            "escalation_level",
            "submitted_at",
            "decided_at",
            "decided_by",
            "reason",
            "activated_at",
            "expired_at",
            "effect",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_node(self, obj):
        return obj.node.slug_path if obj.node_id else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_program(self, obj):
        return obj.program.slug_path if obj.program_id else None

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_approvals(self, obj):
        return [
            {"approver": a.approver.username, "tier": a.tier, "at": a.at}
            for a in obj.approvals.all()
        ]
