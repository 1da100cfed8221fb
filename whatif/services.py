"""Every write of the what-if feature: ask for a preview, run it, apply it.

A preview never changes a grant: it reads the records (``export``), replays them twice
(``replay``) and stores the two results. Applying goes through ``budgets.services.set_grant``
for each changed node, in one transaction, so the usual validation and audit rows apply and a
refusal leaves nothing half-written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import time
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from budgets import services as budget_services
from budgets.models import BudgetNode
from whatif import enqueue, proposal, replay
from whatif.export import current_tree, export_workload
from whatif.models import Preview, Workload

log = logging.getLogger(__name__)
S = Preview.Status
# A preview still queued or running this long after it was asked for is taken as lost (its
# message dropped, its worker gone before it could record a failure): it no longer counts
# against its user's limit, so a lost message never locks anyone out.
LOST_AFTER = dt.timedelta(hours=6)


class TooManyPreviews(Exception):
    """The user already has ALLOT_WHATIF_MAX_PER_USER previews queued or running."""

    field = None

    def __init__(self, limit: int):
        self.message = (
            f"You already have {limit} previews queued or running, the most one user may "
            f"have at once (ALLOT_WHATIF_MAX_PER_USER = {limit}); wait for one to finish."
        )
        super().__init__(self.message)


def _check_limit(user, now: dt.datetime) -> None:
    """Refuse a new replay while the user has the limit waiting. The user's row is locked
    first, so two requests at once cannot both see room for one (SQLite's IMMEDIATE
    transactions serialise them anyway)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).exists()
    limit = int(settings.ALLOT_WHATIF_MAX_PER_USER)
    active = Preview.objects.filter(
        requested_by=user, status__in=[S.QUEUED, S.RUNNING], created_at__gte=now - LOST_AFTER
    ).count()
    if active >= limit:
        raise TooManyPreviews(limit)


def _fresh(weeks: int, now: dt.datetime, period_grants) -> Workload | None:
    """The newest workload read within ALLOT_WHATIF_SNAPSHOT_S, if the tree's grants and
    weights are still those it was read with (an applied proposal makes it stale)."""
    since = now - dt.timedelta(seconds=int(settings.ALLOT_WHATIF_SNAPSHOT_S))
    recent = (
        Workload.objects.filter(weeks=weeks, as_of__gte=since, as_of__lte=now)
        .order_by("-as_of")
        .first()
    )
    if recent is None:
        return None
    grants, weights = period_grants
    if recent.data["grants"] != grants or recent.data["weights"] != weights:
        return None
    return recent


def _workload(weeks: int, now: dt.datetime) -> Workload:
    """The records of the last ``weeks``: read again at most every ALLOT_WHATIF_SNAPSHOT_S
    seconds, so asking twice within it replays the same workload (and hits the cache)."""
    fresh = _fresh(weeks, now, current_tree(now))
    if fresh is not None:
        return fresh
    w = export_workload(weeks, now)
    data = {
        "scenario": w.scenario,
        "trace": w.trace_csv(),
        "grants": w.grants,
        "weights": w.weights,
        "per_window": w.per_window,
        "horizon_s": w.horizon_s,
    }
    row, _ = Workload.objects.get_or_create(
        digest=w.digest(),
        defaults={"weeks": weeks, "as_of": now, "data": data, "jobs": len(w.trace)},
    )
    return row


def cache_key(workload: Workload, grants: dict[str, str]) -> str:
    return hashlib.sha256(
        f"{workload.digest}:{json.dumps(grants, sort_keys=True)}".encode()
    ).hexdigest()


def request_preview(user, weeks, grants, now: dt.datetime | None = None) -> Preview:
    """Check the proposal, read the workload, and queue the replays — or, when the same
    workload and proposal were replayed before, answer with that result at once. A replay is
    refused (``TooManyPreviews``) while the user has ALLOT_WHATIF_MAX_PER_USER waiting; an
    answer from the cache costs nothing and is never refused."""
    weeks = proposal.parse_weeks(weeks)
    if not proposal.may_preview(user):
        raise proposal.ScopeError("grants", "Only leadership and managers can preview changes.")
    with transaction.atomic():
        workload = _workload(weeks, now or timezone.now())
        current = workload.data["grants"]
        proposed = proposal.parse_proposal(user, grants, current)
        key = cache_key(workload, proposed)
        done = Preview.objects.filter(cache_key=key, status=S.DONE).first()
        if not done:
            _check_limit(user, timezone.now())
        preview = Preview.objects.create(
            requested_by=user,
            workload=workload,
            grants=proposed,
            cache_key=key,
            status=S.DONE if done else S.QUEUED,
            progress=1.0 if done else 0.0,
            result=done.result if done else None,
            finished_at=timezone.now() if done else None,
        )
        if not done:
            enqueue.run_preview(preview.pk)
    return preview


class _Reporter:
    """Writes progress at most every half second: a replay calls back at every pass."""

    def __init__(self, pk: int, low: float, high: float):
        self.pk, self.low, self.high, self.last = pk, low, high, 0.0

    def __call__(self, fraction: float) -> None:
        now = time.monotonic()
        if now - self.last < 0.5:
            return
        self.last = now
        value = round(self.low + (self.high - self.low) * fraction, 4)
        Preview.objects.filter(pk=self.pk).update(progress=min(1.0, max(0.0, value)))


def _current_result(workload: Workload) -> dict | None:
    """The current grants' replay of this workload, if some earlier preview made it."""
    for result in (
        Preview.objects.filter(workload=workload, status=S.DONE)
        .exclude(result=None)
        .values_list("result", flat=True)[:1]
    ):
        return result["current"]
    return None


def run_preview(preview_id: int) -> None:
    """The task's body: replay current and proposed, store both. Safe to run twice: a
    finished preview is left alone."""
    preview = Preview.objects.select_related("workload").get(pk=preview_id)
    if preview.status in (S.DONE, S.FAILED):
        return
    Preview.objects.filter(pk=preview.pk).update(status=S.RUNNING)
    data = preview.workload.data
    background = None
    try:
        scenario = replay.proposed_scenario(
            data["scenario"], data["grants"], data["weights"], data["per_window"], preview.grants
        )
        current = _current_result(preview.workload)
        low = 0.0 if current is not None else 0.5  # where the proposed replay's progress starts
        if current is None and replay.in_background(preview.workload.jobs):
            background = replay.Background(scenario, data["trace"], data["horizon_s"])
        if current is None:
            report = _Reporter(preview.pk, 0, 0.9 if background else 0.5)
            current = replay.replay(data["scenario"], data["trace"], data["horizon_s"], report)
        if background is not None:
            proposed = background.result()
        else:
            report = _Reporter(preview.pk, low, 1.0)
            proposed = replay.replay(scenario, data["trace"], data["horizon_s"], report)
    except Exception as exc:  # a replay that breaks is the preview's failure, shown to its user
        log.exception("what-if #%s failed", preview.pk)
        if background is not None:
            background.stop()
        Preview.objects.filter(pk=preview.pk).update(
            status=S.FAILED, error=str(exc)[:2000], finished_at=timezone.now()
        )
        return
    Preview.objects.filter(pk=preview.pk).update(
        status=S.DONE,
        progress=1.0,
        result={"current": current, "proposed": proposed},
        finished_at=timezone.now(),
    )


def _order(changes: list[tuple[BudgetNode, Decimal, Decimal]]):
    """Cuts first, deepest first; then raises, top first. If the proposed tree is valid, every
    step of this order is too: a cut never leaves children above their parent (their own
    cuts came first, their raises come later), and a raise finds its parent already raised."""
    cuts = [c for c in changes if c[1] < c[2]]
    raises = [c for c in changes if c[1] >= c[2]]
    cuts.sort(key=lambda c: (-c[0].depth, c[0].path))
    raises.sort(key=lambda c: (c[0].depth, c[0].path))
    return cuts + raises


@transaction.atomic
def apply_proposal(user, preview: Preview) -> list[str]:
    """Set every proposed grant through the budget services, all or none. Returns the paths
    changed. Scope is checked again: roles may have changed since the preview."""
    preview = Preview.objects.select_for_update().get(pk=preview.pk)
    from budgets.balances import balances

    nodes = {
        n.slug_path: n
        for n in BudgetNode.objects.filter(slug_path__in=list(preview.grants), archived=False)
    }
    for path in preview.grants:
        field = f"grants.{path}"
        node = nodes.get(path)
        if node is None:
            raise budget_services.BudgetValidationError(field, f"{path} no longer exists.")
        if not proposal.access.can_edit_grant(user, node):
            raise proposal.ScopeError(field, f"You cannot change the grant of {path}.")
    now = balances(list(nodes.values()))
    changes = [
        (nodes[p], Decimal(v), now[nodes[p].pk].grant_gpu_hours) for p, v in preview.grants.items()
    ]
    reason = f"applied from what-if preview #{preview.pk}"
    for node, amount, _old in _order(changes):
        budget_services.set_grant(user, node, amount, reason=reason)
    Preview.objects.filter(pk=preview.pk).update(applied_at=timezone.now())
    return [n.slug_path for n, _, _ in changes]
