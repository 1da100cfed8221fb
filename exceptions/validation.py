"""Kind-specific checks for a new request: each input parsed, each target resolved within the
requester's scope, and every refusal naming its field."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from budgets import access
from budgets.errors import BudgetValidationError
from budgets.models import BudgetNode
from core.parsing import parse_id, parse_int
from exceptions.errors import ExceptionPermissionError, ExceptionValidationError
from exceptions.models import OPEN_STATES, ExceptionRequest, Kind

MAX_JUSTIFICATION = 4000


def max_protection_h() -> Decimal:
    return Decimal(str(getattr(settings, "ALLOT_EXCEPTION_MAX_PROTECTION_H", 72)))


def max_reservation_h() -> Decimal:
    return Decimal(str(getattr(settings, "ALLOT_EXCEPTION_MAX_RESERVATION_H", 168)))


def justification(text) -> str:
    text = (text or "").strip()
    if not text:
        raise ExceptionValidationError("justification", "Say why the rule should bend.")
    if len(text) > MAX_JUSTIFICATION:
        raise ExceptionValidationError(
            "justification", f"Keep the justification under {MAX_JUSTIFICATION} characters."
        )
    return text


def _decimal(value, field: str, what: str) -> Decimal:
    if value in (None, ""):
        raise ExceptionValidationError(field, f"Give the {what}.")
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise ExceptionValidationError(field, f"“{value}” is not a number.") from None
    if not amount.is_finite() or amount <= 0:
        raise ExceptionValidationError(field, f"The {what} must be more than zero.")
    return amount


def protection(actor, job, hours) -> dict:
    """A job the actor may act on (its owner, or a cluster admin), still alive, with no other
    open protection request, and hours beyond its own contract up to the configured cap."""
    from scheduling.access import get_job_for_user

    if job in (None, ""):
        raise ExceptionValidationError("job", "Say which job needs longer protection.")
    try:
        job = get_job_for_user(actor, getattr(job, "pk", job), write=True)
    except Http404:
        raise ExceptionValidationError("job", f"No job #{job} that you can see.") from None
    except PermissionDenied:
        raise ExceptionPermissionError(
            "job", "Only the job's owner or a cluster admin can ask to protect it longer."
        ) from None
    if job.is_terminal:
        raise ExceptionValidationError("job", f"Job #{job.pk} is already {job.state}.")
    amount = _decimal(hours, "hours", "number of hours").quantize(Decimal("0.01"))
    cap = int(getattr(settings, "ALLOT_MAX_MIN_RUNTIME_S", 8 * 3600))
    own = Decimal(min(job.min_runtime_s, cap)) / 3600  # what its contract alone protects
    if amount <= own:
        raise ExceptionValidationError(
            "hours", f"Job #{job.pk} is already protected for {own:g} h; ask for more than that."
        )
    if amount > max_protection_h():
        raise ExceptionValidationError(
            "hours", f"Protection can be extended to at most {max_protection_h():g} h."
        )
    if ExceptionRequest.objects.filter(
        kind=Kind.EXTENDED_PROTECTION, job=job, state__in=OPEN_STATES
    ).exists():
        raise ExceptionValidationError(
            "job", f"Job #{job.pk} already has an open protection request."
        )
    return {"job": job, "hours": amount, "scope": job.project}


def _node(actor, node) -> BudgetNode:
    if node in (None, ""):
        raise ExceptionValidationError("node", "Say which budget node.")
    key = getattr(node, "pk", node)
    pk, path = parse_id(key), str(key).strip("/")[:500]
    if pk is not None:
        found = BudgetNode.objects.filter(pk=pk, archived=False).first()
    else:
        found = BudgetNode.objects.filter(slug_path=path, archived=False).first()
    if found is None or not access.can_see(actor, found):
        raise ExceptionValidationError("node", f"No budget node “{path[:80]}” that you can see.")
    return found


def topup(actor, node, gpu_hours) -> dict:
    from budgets.services import parse_gpu_hours

    node = _node(actor, node)
    if node.is_root():
        raise ExceptionValidationError(
            "node", "The organisation's own grant is set by leadership, not topped up."
        )
    if gpu_hours in (None, ""):
        raise ExceptionValidationError("gpu_hours", "Give the number of GPU-hours.")
    try:
        amount = parse_gpu_hours(gpu_hours, "gpu_hours", allow_zero=False)
    except BudgetValidationError as exc:
        raise ExceptionValidationError(exc.field, exc.message) from None
    return {"node": node, "gpu_hours": amount, "scope": node}


def _moment(value, field: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        moment = value
    else:
        moment = parse_datetime(str(value or "").strip()) if value else None
        if moment is None:
            raise ExceptionValidationError(field, f"“{value or ''}” is not a date and time.")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


def _cluster(cluster):
    from scheduling.models import Cluster

    if cluster in (None, ""):
        raise ExceptionValidationError("cluster", "Say which cluster.")
    key = getattr(cluster, "pk", cluster)
    pk, name = parse_id(key), str(key)[:64]
    found = Cluster.objects.filter(pk=pk).first() if pk is not None else None
    found = found or Cluster.objects.filter(name=name).first()
    if found is None:
        raise ExceptionValidationError("cluster", f"No cluster “{name}”.")
    return found


def _reservation_project(actor, node):
    projects = access.user_projects(actor)
    if node not in (None, ""):
        project = _node(actor, node)
        if not access.is_cluster_admin(actor) and not projects.filter(pk=project.pk).exists():
            raise ExceptionValidationError("node", f"You do not work in {project.label}.")
        return project
    mine = list(projects[:2])
    if len(mine) == 1:
        return mine[0]
    if mine:
        raise ExceptionValidationError("node", "Say which of your projects the run is for.")
    if access.is_cluster_admin(actor):
        return None
    raise ExceptionPermissionError(
        "cluster", "Only project members (or cluster admins) can reserve capacity."
    )


def reservation(actor, cluster, gpus, start, end, node=None, now=None) -> dict:
    now = now or timezone.now()
    cluster = _cluster(cluster)
    project = _reservation_project(actor, node)
    count = parse_int(gpus)
    if count is None:
        raise ExceptionValidationError("gpus", f"“{str(gpus)[:20]}” is not a number of GPUs.")
    total = sum(cluster.nodes.filter(present=True).values_list("gpus", flat=True))
    if count < 1:
        raise ExceptionValidationError("gpus", "Reserve at least one GPU.")
    if count > total:
        raise ExceptionValidationError("gpus", f"{cluster.name} has only {total} GPUs.")
    starts, ends = _moment(start, "start"), _moment(end, "end")
    if starts < now - dt.timedelta(minutes=5):
        raise ExceptionValidationError("start", "The reservation cannot start in the past.")
    if ends <= starts:
        raise ExceptionValidationError("end", "The reservation must end after it starts.")
    window_h = Decimal((ends - starts).total_seconds()) / 3600
    if window_h > max_reservation_h():
        raise ExceptionValidationError(
            "end", f"A reservation lasts at most {max_reservation_h():g} h."
        )
    return {
        "cluster": cluster,
        "gpus": count,
        "starts_at": starts,
        "ends_at": ends,
        "node": project,
        "scope": project,
        "window_h": window_h,
    }
