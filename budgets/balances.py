"""Balances, shares and windowed usage for many nodes at once.

Every function here runs a fixed number of grouped queries whatever the number of nodes
(pretix's quota arithmetic is the model): usage and liens are summed per node in SQL, then
rolled up to every ancestor in memory using treebeard's materialised path — a node's
ancestors are exactly the prefixes of its `path`, four characters a step — so no query per
node and no recursion in SQL.
"""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import BigIntegerField, F, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from budgets.models import BudgetNode, Grant, Lien, UsageEntry
from budgets.periods import BudgetPeriod

STEP = BudgetNode.steplen
HOUR = Decimal(3600)
CENT = Decimal("0.01")


def gpu_hours(cost_gpu_seconds: int) -> Decimal:
    return (Decimal(cost_gpu_seconds) / HOUR).quantize(CENT)


def with_grants(queryset, period: BudgetPeriod):
    """Annotate nodes with the grant in force for `period` and its version (0 if none).

    The grant in force is the latest row at or before the period's start: grants stand
    until changed.
    """
    in_force = Grant.objects.filter(node=OuterRef("pk"), period_start__lte=period.start).order_by(
        "-period_start"
    )
    return queryset.annotate(
        grant_in_force=Subquery(in_force.values("gpu_hours")[:1]),
        grant_version=Subquery(in_force.values("version")[:1]),
    )


def _rolled_up(rows) -> dict[str, int]:
    """{node path: own total} → {node path: own + descendants' total} for every ancestor."""
    totals: dict[str, int] = defaultdict(int)
    for path, total in rows:
        for end in range(STEP, len(path) + 1, STEP):
            totals[path[:end]] += total or 0
    return totals


def usage_by_path(start: dt.datetime, end: dt.datetime, under: str = "") -> dict[str, int]:
    """Cost-GPU-seconds charged in [start, end) per node path, rolled up; `under` limits the
    sum to one subtree (its ancestors then carry only that subtree's part)."""
    rows = (
        UsageEntry.objects.filter(
            interval_start__gte=start, interval_start__lt=end, node__path__startswith=under
        )
        .values_list("node__path")
        .annotate(total=Sum("cost_gpu_seconds"))
        .order_by()
    )
    return _rolled_up(rows)


def burn_by_path(now: dt.datetime | None = None) -> dict[str, int]:
    """Cost-GPU-seconds charged in the last 24 hours per node path, rolled up: the burn rate
    ``allot budgets`` and the API show beside what remains (one query)."""
    now = now or timezone.now()
    return usage_by_path(now - dt.timedelta(days=1), now)


def held_by_path(under: str = "") -> dict[str, int]:
    outstanding = Greatest(
        F("cost_gpu_seconds") - F("charged_gpu_seconds"),
        Value(0),
        output_field=BigIntegerField(),
    )
    rows = (
        Lien.objects.filter(released_at__isnull=True, node__path__startswith=under)
        .values_list("node__path")
        .annotate(total=Sum(outstanding))
        .order_by()
    )
    return _rolled_up(rows)


@dataclass
class NodeStats:
    """One node's numbers for the current period, in cost-normalised GPU-hours."""

    node: BudgetNode
    grant_gpu_hours: Decimal
    version: int
    used_gpu_hours: Decimal
    held_gpu_hours: Decimal
    share: float = 1.0
    share_of_whole: float = 1.0

    @property
    def remaining_gpu_hours(self) -> Decimal:
        return self.grant_gpu_hours - self.used_gpu_hours - self.held_gpu_hours

    @property
    def used_fraction(self) -> float:
        if not self.grant_gpu_hours:
            return 1.0 if self.used_gpu_hours else 0.0
        return min(1.0, float(self.used_gpu_hours / self.grant_gpu_hours))


def _stats(nodes, period: BudgetPeriod) -> dict[int, NodeStats]:
    used = usage_by_path(period.start_at, period.end_at)
    held = held_by_path()
    return {
        n.pk: NodeStats(
            node=n,
            grant_gpu_hours=Decimal(n.grant_in_force or 0).quantize(CENT),
            version=n.grant_version or 0,
            used_gpu_hours=gpu_hours(used.get(n.path, 0)),
            held_gpu_hours=gpu_hours(held.get(n.path, 0)),
        )
        for n in nodes
    }


def tree_stats(period: BudgetPeriod | None = None) -> dict[int, NodeStats]:
    """Every active node with grant, shares, used, held and remaining: three queries.

    A node's share is its weight (or, without one, its grant) over the sum of its active
    siblings'; its share of the whole is the product of shares from the top, which is the
    budget share the fair-share scheduler and the simulator report.
    """
    period = period or BudgetPeriod.current()
    nodes = list(with_grants(BudgetNode.objects.filter(archived=False), period).order_by("path"))
    stats = _stats(nodes, period)
    by_path = {s.node.path: s for s in stats.values()}
    sibling_sums: dict[str, Decimal] = defaultdict(Decimal)
    for s in stats.values():
        sibling_sums[s.node.path[:-STEP]] += _share_basis(s)
    for s in stats.values():  # ordered by path: parents before children
        parent = by_path.get(s.node.path[:-STEP])
        if parent is None:
            continue
        total = sibling_sums[s.node.path[:-STEP]]
        s.share = float(_share_basis(s) / total) if total else 0.0
        s.share_of_whole = parent.share_of_whole * s.share
    return stats


def _share_basis(s: NodeStats) -> Decimal:
    return s.node.weight if s.node.weight is not None else s.grant_gpu_hours


def balances(nodes, period: BudgetPeriod | None = None) -> dict[int, NodeStats]:
    """Grant, used, held and remaining for the given nodes (no shares): three queries."""
    period = period or BudgetPeriod.current()
    ids = [n.pk for n in nodes]
    annotated = with_grants(BudgetNode.objects.filter(pk__in=ids), period).order_by("path")
    return _stats(annotated, period)


def remaining_cost_seconds(node: BudgetNode, period: BudgetPeriod | None = None) -> int:
    """What `node` can still fund this period, in cost-GPU-seconds (grant − used − held)."""
    period = period or BudgetPeriod.current()
    grant = with_grants(BudgetNode.objects.filter(pk=node.pk), period).values_list(
        "grant_in_force", flat=True
    )[0]
    used = usage_by_path(period.start_at, period.end_at, under=node.path).get(node.path, 0)
    held = held_by_path(under=node.path).get(node.path, 0)
    return int((grant or 0) * HOUR) - used - held


def committed_gpu_hours(node: BudgetNode, period: BudgetPeriod) -> tuple[Decimal, Decimal]:
    """What `node` and its subtree have spent in `period` and what the open liens of their
    running jobs still hold (counted for the current period only: liens spend today's
    balance), each rounded up to the cent, so a grant at their sum leaves nothing below zero."""
    used = usage_by_path(period.start_at, period.end_at, under=node.path).get(node.path, 0)
    held = 0
    if period == BudgetPeriod.current():
        held = held_by_path(under=node.path).get(node.path, 0)
    return hours_up(used), hours_up(held)


def hours_up(cost_gpu_seconds: int) -> Decimal:
    # 36 cost-seconds are a hundredth of a GPU-hour; round up, never below what is owed.
    return (Decimal(-(-max(cost_gpu_seconds, 0) // 36)) / 100).quantize(CENT)


def remaining_of(nodes: list[BudgetNode], period: BudgetPeriod | None = None) -> list[int]:
    """``remaining_cost_seconds`` for each of ``nodes`` in three queries instead of three per
    node. For one chain (a node and its ancestors) only the top's subtree is summed."""
    period = period or BudgetPeriod.current()
    grants = dict(
        with_grants(BudgetNode.objects.filter(pk__in=[n.pk for n in nodes]), period).values_list(
            "pk", "grant_in_force"
        )
    )
    top = min(nodes, key=lambda n: len(n.path)).path
    # Under the top node only when it is every node's ancestor (one chain); else the tree.
    top = top if all(n.path.startswith(top) for n in nodes) else ""
    used = usage_by_path(period.start_at, period.end_at, under=top)
    held = held_by_path(under=top)
    return [
        int((grants.get(n.pk) or 0) * HOUR) - used.get(n.path, 0) - held.get(n.path, 0)
        for n in nodes
    ]


def remaining_by_path(
    period: BudgetPeriod | None = None, *, with_liens: bool = True
) -> dict[str, int]:
    """Cost-GPU-seconds every active node can still spend this period (grant − used − held,
    subtrees included), keyed by treebeard path: three queries, for the charging floor.
    ``with_liens=False`` leaves open liens out (a past period's balance: liens spend the
    current one)."""
    period = period or BudgetPeriod.current()
    nodes = with_grants(BudgetNode.objects.filter(archived=False), period).values_list(
        "path", "grant_in_force"
    )
    used = usage_by_path(period.start_at, period.end_at)
    held = held_by_path() if with_liens else {}
    return {
        path: int((grant or 0) * HOUR) - used.get(path, 0) - held.get(path, 0)
        for path, grant in nodes
    }


def chain_paths(node: BudgetNode) -> list[str]:
    """The treebeard paths of `node` and its ancestors, from the top."""
    return [node.path[:end] for end in range(STEP, len(node.path) + 1, STEP)]


def window_start(now: dt.datetime | None = None, days: int | None = None) -> dt.datetime:
    days = settings.ALLOT_FAIRSHARE_WINDOW_DAYS if days is None else days
    return (now or timezone.now()) - dt.timedelta(days=days)


def windowed_usage(now: dt.datetime | None = None, days: int | None = None) -> dict[int, int]:
    """Cost-GPU-seconds per node id (own + descendants) over the fair-share window."""
    now = now or timezone.now()
    totals = usage_by_path(window_start(now, days), now)
    ids = dict(BudgetNode.objects.filter(path__in=list(totals)).values_list("path", "pk"))
    return {ids[path]: total for path, total in totals.items() if path in ids}


def windowed_user_usage(
    now: dt.datetime | None = None, days: int | None = None
) -> dict[tuple[int, int | None], int]:
    """Cost-GPU-seconds per (project node id, user id) over the window, for per-user fair share
    inside a project."""
    now = now or timezone.now()
    rows = (
        UsageEntry.objects.filter(
            interval_start__gte=window_start(now, days), interval_start__lt=now
        )
        .values_list("node_id", "user_id")
        .annotate(total=Sum("cost_gpu_seconds"))
        .order_by()
    )
    return {(node_id, user_id): total for node_id, user_id, total in rows}
