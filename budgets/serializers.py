"""API shapes for budget nodes, their changes (grant, name, weight, structure) and transfers.
Serializers read `NodeStats` (numbers computed for many nodes at once), never compute per row."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from budgets.balances import gpu_hours
from budgets.models import AuditEntry

GPU_HOURS = {"max_digits": 16, "decimal_places": 2, "coerce_to_string": False}


class BudgetNodeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="node.pk")
    name = serializers.CharField(source="node.name")
    path = serializers.CharField(source="node.slug_path", help_text="e.g. nlp/olmo; root is ''")
    parent = serializers.SerializerMethodField()
    depth = serializers.IntegerField(source="node.depth")
    grant_gpu_hours = serializers.DecimalField(**GPU_HOURS)
    weight = serializers.DecimalField(source="node.weight", allow_null=True, **GPU_HOURS)
    share = serializers.FloatField(help_text="Normalised share among siblings (0–1).")
    share_of_whole = serializers.FloatField(help_text="Product of shares from the top.")
    used_gpu_hours = serializers.DecimalField(**GPU_HOURS)
    held_gpu_hours = serializers.DecimalField(**GPU_HOURS)
    remaining_gpu_hours = serializers.DecimalField(**GPU_HOURS)
    burn_gpu_hours_per_day = serializers.SerializerMethodField(
        help_text="GPU-hours charged to the node and its descendants in the last 24 hours."
    )
    version = serializers.IntegerField(help_text="Send it back with a PATCH to detect conflicts.")

    def get_parent(self, stats) -> int | None:
        return self.context["parent_ids"].get(stats.node.pk)

    @extend_schema_field(OpenApiTypes.NUMBER)
    def get_burn_gpu_hours_per_day(self, stats) -> float:
        return float(gpu_hours(self.context.get("burn", {}).get(stats.node.path, 0)))


MAX_REASON = 1000
REASON = {
    "required": False,
    "allow_blank": True,
    "default": "",
    "max_length": MAX_REASON,
    "help_text": "For the audit.",
}
# Names and slugs are checked by the services, so page and API refuse them in the same words.
NAME = {"allow_blank": True, "max_length": None}
CHANGES = ("name", "slug", "weight", "grant_gpu_hours")


class NodeUpdateSerializer(serializers.Serializer):
    """A PATCH: any of name, slug, weight and grant, applied together or not at all."""

    name = serializers.CharField(required=False, **NAME)
    slug = serializers.CharField(
        required=False, help_text="Short name in the path; changes descendants' paths.", **NAME
    )
    weight = serializers.DecimalField(
        required=False,
        allow_null=True,
        max_digits=16,
        decimal_places=2,
        help_text="Share among siblings instead of the grant; null clears it.",
    )
    grant_gpu_hours = serializers.DecimalField(required=False, max_digits=16, decimal_places=2)
    version = serializers.IntegerField(
        required=False, min_value=0, help_text="The version you read; a mismatch answers 409."
    )
    reason = serializers.CharField(**REASON)

    def validate(self, attrs):
        if not any(field in attrs for field in CHANGES):
            # Named after the field a PATCH most often carries, as before it took others.
            raise serializers.ValidationError(
                {"grant_gpu_hours": "Send at least one of name, slug, weight, grant_gpu_hours."}
            )
        return attrs


class NodeCreateSerializer(serializers.Serializer):
    parent = serializers.IntegerField(help_text="The node to create the child under.")
    name = serializers.CharField(**NAME)
    slug = serializers.CharField(
        required=False, default="", help_text="Defaults to the name, slugified.", **NAME
    )
    grant_gpu_hours = serializers.DecimalField(
        required=False, allow_null=True, max_digits=16, decimal_places=2
    )
    reason = serializers.CharField(**REASON)


class NodeMoveSerializer(serializers.Serializer):
    parent = serializers.IntegerField(help_text="The new parent.")
    reason = serializers.CharField(**REASON)


class NodeArchiveSerializer(serializers.Serializer):
    reason = serializers.CharField(**REASON)


class ArchivedNodeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    path = serializers.CharField(source="slug_path")
    archived = serializers.BooleanField()


class TransferSerializer(serializers.Serializer):
    source = serializers.IntegerField()
    target = serializers.IntegerField()
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)
    reason = serializers.CharField(**REASON)


class TransferResultSerializer(serializers.Serializer):
    source = BudgetNodeSerializer()
    target = BudgetNodeSerializer()


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None)

    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor", "action", "field", "old", "new", "reason"]
