"""The job list's query parameters (``GET /api/v1/jobs/``): what ``allot queue`` and scripts
filter on. Every value is checked; a bad one is a 400 naming its parameter, never an empty
list that looks like an answer."""

from __future__ import annotations

from django.db.models import Case, F, IntegerField, Q, Value, When
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError

from scheduling.models import Job

TRUE, FALSE = {"1", "true", "yes"}, {"0", "false", "no", ""}
ORDERS = ("submitted", "queue")

LIST_PARAMETERS = [
    OpenApiParameter(
        "state",
        OpenApiTypes.STR,
        description="One state or several, comma-separated: "
        f"{', '.join(Job.State.values)} (e.g. pending,running,preempted).",
    ),
    OpenApiParameter("cluster", OpenApiTypes.STR, description="A cluster's name."),
    OpenApiParameter("owner", OpenApiTypes.STR, description="The owner's username."),
    OpenApiParameter("mine", OpenApiTypes.BOOL, description="Only the caller's own jobs."),
    OpenApiParameter(
        "project",
        OpenApiTypes.STR,
        description="A budget path such as nlp/olmo: jobs it or a node below it pays for; "
        "an empty value (project=) selects unfunded submissions.",
    ),
    OpenApiParameter(
        "order",
        OpenApiTypes.STR,
        enum=list(ORDERS),
        description="submitted (default): newest first. queue: like squeue, running jobs "
        "first (oldest start first), then preempted, then pending by queue position.",
    ),
]


def filter_jobs(jobs, params, user):
    states = _states(params.get("state"))
    if states:
        jobs = jobs.filter(state__in=states)
    if params.get("cluster"):
        jobs = jobs.filter(cluster__name=params["cluster"])
    if params.get("owner"):
        jobs = jobs.filter(owner__username=params["owner"])
    if _flag(params.get("mine"), "mine"):
        jobs = jobs.filter(owner=user)
    if "project" in params:
        jobs = _by_project(jobs, params["project"].strip("/"))
    return jobs.order_by(*_ordering(params.get("order") or "submitted"))


def _states(text: str | None) -> list[str]:
    if not text:
        return []
    states = [part.strip() for part in text.split(",") if part.strip()]
    for name in states:
        if name not in Job.State.values:
            raise ValidationError(
                {"state": f"{name!r} is not a state: use {', '.join(Job.State.values)}."}
            )
    return states


def _flag(text: str | None, name: str) -> bool:
    value = (text or "").lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValidationError({name: f"{text!r} is not true or false."})


def _by_project(jobs, path: str):
    if not path:
        return jobs.filter(project__isnull=True)
    return jobs.filter(Q(project__slug_path=path) | Q(project__slug_path__startswith=path + "/"))


def _ordering(order: str):
    if order == "submitted":
        return ("-submitted_at", "-id")
    if order == "queue":
        group = Case(
            When(state=Job.State.RUNNING, then=Value(0)),
            When(state=Job.State.PREEMPTED, then=Value(1)),
            When(state=Job.State.PENDING, then=Value(2)),
            default=Value(3),
            output_field=IntegerField(),
        )
        return (
            group,
            F("queue_position").asc(nulls_last=True),
            F("started_at").asc(nulls_last=True),
            "submitted_at",
            "id",
        )
    raise ValidationError({"order": f"{order!r} is not an order: use {' or '.join(ORDERS)}."})
