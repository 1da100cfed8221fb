from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from whatif.models import Preview
from whatif.proposal import visible_result


class PreviewRequestSerializer(serializers.Serializer):
    weeks = serializers.IntegerField(
        default=4, help_text="How many weeks of the organisation's own jobs to replay (1–12)."
    )
    grants = serializers.DictField(
        child=serializers.CharField(),
        default=dict,
        help_text="Proposed grants by path, in GPU-hours per budget period, e.g. "
        '{"nlp/olmo": 500000}; the rest unchanged.',
    )


class PreviewCreatedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(
        help_text="queued, or done when the same workload and "
        "proposal were replayed before (the cached result)."
    )


class PreviewSerializer(serializers.ModelSerializer):
    weeks = serializers.IntegerField(source="workload.weeks")
    as_of = serializers.DateTimeField(source="workload.as_of")
    jobs = serializers.IntegerField(source="workload.jobs")
    result = serializers.SerializerMethodField()

    class Meta:
        model = Preview
        fields = [
            "id", "status", "progress", "weeks", "as_of", "jobs", "grants", "result", "error",
            "created_at", "finished_at", "applied_at",
        ]  # fmt: skip

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "description": 'When done: {"current": ..., "proposed": ...}, each the simulator\'s '
            "JSON over the same workload (projects limited to those you may see).",
        }
    )
    def get_result(self, obj):
        return visible_result(self.context["request"].user, obj.result)
