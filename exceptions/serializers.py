from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from exceptions.models import ExceptionRequest, Kind
from portal.parsing import MAX_DB_INT


class ExceptionCreateSerializer(serializers.Serializer):
    """The shape of a request; what each kind needs is checked by the service, which names the
    field at fault."""

    kind = serializers.ChoiceField(choices=Kind.values)
    justification = serializers.CharField(allow_blank=True, default="", max_length=4000)
    job = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_DB_INT,
        help_text="extended_protection: the job's id",
    )
    hours = serializers.DecimalField(
        max_digits=7,
        decimal_places=2,
        required=False,
        allow_null=True,
        help_text="extended_protection: protected hours from each start",
    )
    node = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=500,
        help_text="budget_topup (or a reservation's project): id or path",
    )
    gpu_hours = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        required=False,
        allow_null=True,
        help_text="budget_topup: extra GPU-hours",
    )
    cluster = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=64,
        help_text="reservation: cluster name or id",
    )
    gpus = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=1_000_000
    )
    start = serializers.DateTimeField(required=False, allow_null=True)
    end = serializers.DateTimeField(required=False, allow_null=True)


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
