"""Read-only serializers that resolve their fields once per class, not once per object.

DRF builds a serializer's fields for every instance it creates (deep copies of ~25 field
objects for a job) and then walks them through generators, ``get_attribute`` and
``to_representation``: about 2,000 Python calls for one job, a fifth of an API submission's
(the answer) and most of a job list's. ``PlannedRepresentation`` walks a plan made once per
class instead: per field, the attribute path read with ``operator.attrgetter`` and the
field's own ``to_representation`` for its value, or the serializer's ``get_<name>`` method.
The output is DRF's (``tests/scheduling/test_job_representation.py`` compares them).

The plan accepts only fields whose ``to_representation`` reads nothing but the value (plain
scalars, dates, choices, JSON); a relation or nested serializer raises ``TypeError`` when the
plan is built, so nobody gets a silently different answer. Whatever the plan cannot read
simply (a missing related object, a callable attribute) goes through DRF's own path for that
field.
"""

from __future__ import annotations

from operator import attrgetter

from rest_framework import fields as drf_fields
from rest_framework import serializers

# Fields whose to_representation depends on the value alone (no context, no parent).
CONTEXT_FREE = (
    drf_fields.BooleanField,
    drf_fields.CharField,
    drf_fields.ChoiceField,
    drf_fields.DateField,
    drf_fields.DateTimeField,
    drf_fields.DecimalField,
    drf_fields.DurationField,
    drf_fields.FloatField,
    drf_fields.IntegerField,
    drf_fields.JSONField,
    drf_fields.ReadOnlyField,
    drf_fields.UUIDField,
)


class PlannedRepresentation:
    """Mix into a read-only ``Serializer``/``ModelSerializer`` (before it in the bases)."""

    def to_representation(self, instance):
        plan = type(self).__dict__.get("_representation_plan")
        if plan is None:
            plan = _plan(self)
            type(self)._representation_plan = plan
        out = {}
        for name, read, convert, method, field in plan:
            if method is not None:
                out[name] = getattr(self, method)(instance)
                continue
            try:
                value = read(instance)
            except Exception:  # DRF's own path decides: a default, None, skipped or an error
                value = _drf_attribute(field, instance)
                if value is _SKIP:
                    continue
            if callable(value):
                value = _drf_attribute(field, instance)
                if value is _SKIP:
                    continue
            out[name] = None if value is None else convert(value)
        return out


_SKIP = object()


def _drf_attribute(field, instance):
    try:
        return field.get_attribute(instance)
    except drf_fields.SkipField:
        return _SKIP


def _plan(serializer) -> tuple:
    plan = []
    for name, field in serializer.fields.items():
        if field.write_only:
            continue
        if isinstance(field, serializers.SerializerMethodField):
            plan.append((name, None, None, field.method_name, field))
            continue
        if not isinstance(field, CONTEXT_FREE) or "*" in field.source_attrs:
            raise TypeError(
                f"{type(serializer).__name__}.{name}: {type(field).__name__} may read the "
                "serializer's context; PlannedRepresentation takes plain fields only"
            )
        read = attrgetter(".".join(field.source_attrs))
        plan.append((name, read, field.to_representation, None, field))
    return tuple(plan)
