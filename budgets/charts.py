"""The burn-down of one node over the current period: data for the JSON endpoint and an
inline SVG drawn on the server, so the page needs no chart library."""

from datetime import date
from decimal import Decimal

from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

from budgets.balances import balances, gpu_hours
from budgets.models import UsageEntry
from budgets.periods import BudgetPeriod


def burndown(node, period: BudgetPeriod | None = None) -> dict:
    """Cumulative use and what remains of the grant, one point per day up to today."""
    period = period or BudgetPeriod.current()
    grant = balances([node], period)[node.pk].grant_gpu_hours
    per_day = dict(
        UsageEntry.objects.filter(
            node__path__startswith=node.path,
            interval_start__gte=period.start_at,
            interval_start__lt=period.end_at,
        )
        .annotate(day=TruncDate("interval_start", tzinfo=timezone.get_current_timezone()))
        .values_list("day")
        .annotate(total=Sum("cost_gpu_seconds"))
        .order_by()
    )
    today = timezone.localdate()
    points, used = [], 0
    for day in period.days():
        if day > today:
            break
        used += per_day.get(day, 0)
        points.append(
            {
                "date": day.isoformat(),
                "used_gpu_hours": str(gpu_hours(used)),
                "remaining_gpu_hours": str(grant - gpu_hours(used)),
            }
        )
    return {
        "node": node.pk,
        "path": node.slug_path,
        "period": {
            "kind": period.kind,
            "start": period.start.isoformat(),
            "end": period.end.isoformat(),
        },
        "grant_gpu_hours": str(grant),
        "points": points,
    }


def burndown_svg(data: dict, width: int = 640, height: int = 220) -> str:
    """Remaining grant per day (solid) against an even burn to zero (dashed)."""
    left, right, top, bottom = 64, 12, 12, 28
    days = max(1, _days(data))
    grant = Decimal(data["grant_gpu_hours"])
    remaining = [Decimal(p["remaining_gpu_hours"]) for p in data["points"]]
    low = min([Decimal(0), *remaining])
    high = max([grant, *remaining, Decimal(1)])

    def x(i):
        return left + (width - left - right) * i / days

    def y(v):
        return top + (height - top - bottom) * float((high - v) / (high - low))

    parts = [
        f'<svg class="burndown" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Burn-down of {escape(data["path"] or "the organisation")}">',
        f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" '
        'stroke="#c3cad6"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#c3cad6"/>',
        f'<text x="{left - 6}" y="{y(high) + 4:.1f}" text-anchor="end" font-size="11">'
        f"{high:,.0f}</text>",
        f'<text x="{left - 6}" y="{y(0) + 4:.1f}" text-anchor="end" font-size="11">0</text>',
        f'<text x="{left}" y="{height - 8}" font-size="11">{data["period"]["start"]}</text>',
        f'<text x="{width - right}" y="{height - 8}" font-size="11" text-anchor="end">'
        f"{data['period']['end']}</text>",
        f'<polyline class="ideal" fill="none" stroke="#9aa3b2" stroke-dasharray="4 4" '
        f'points="{x(0):.1f},{y(grant):.1f} {x(days):.1f},{y(0):.1f}"/>',
    ]
    if remaining:
        line = " ".join(f"{x(i + 1):.1f},{y(v):.1f}" for i, v in enumerate(remaining))
        start = f"{x(0):.1f},{y(grant):.1f} "
        parts.append(
            f'<polyline class="remaining" fill="none" stroke="#2f5bd3" stroke-width="2" '
            f'points="{start}{line}"/>'
        )
    if not any(Decimal(p["used_gpu_hours"]) for p in data["points"]):
        parts.append(
            f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle" '
            f'font-size="13" fill="#5b6475">No usage charged yet this period</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 — every interpolated text is escaped or numeric


def _days(data: dict) -> int:
    start = date.fromisoformat(data["period"]["start"])
    end = date.fromisoformat(data["period"]["end"])
    return (end - start).days
