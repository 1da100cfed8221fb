"""API shapes for budget nodes, grant changes and transfers. Serializers read `NodeStats`
(numbers computed for many nodes at once), never compute per row."""

from rest_framework import serializers

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
    version = serializers.IntegerField(help_text="Send it back with a PATCH to detect conflicts.")

    def get_parent(self, stats) -> int | None:
        return self.context["parent_ids"].get(stats.node.pk)


class GrantUpdateSerializer(serializers.Serializer):
    grant_gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)
    version = serializers.IntegerField(
        required=False, min_value=0, help_text="The version you read; a mismatch answers 409."
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class TransferSerializer(serializers.Serializer):
    source = serializers.IntegerField()
    target = serializers.IntegerField()
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class TransferResultSerializer(serializers.Serializer):
    source = BudgetNodeSerializer()
    target = BudgetNodeSerializer()


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None)

    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor", "action", "field", "old", "new", "reason"]
