"""Exceptions per program per month, counted in two grouped queries whatever their number."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from django.db.models import Count, Sum
from django.db.models.functions import TruncMonth

from exceptions.models import ExceptionRequest, State

GRANTED = (State.APPROVED, State.ACTIVE, State.EXPIRED)


def monthly_by_program(requests) -> list[dict]:
    """[{program, month, total, by_kind, granted, rejected, withdrawn, pending,
    topup_gpu_hours}] newest month first, then by program path."""
    base = requests.annotate(month=TruncMonth("submitted_at")).order_by()
    counts = base.values("program__slug_path", "month", "kind", "state").annotate(n=Count("id"))
    topups = (
        base.filter(kind=ExceptionRequest.Kind.BUDGET_TOPUP, state__in=GRANTED)
        .values("program__slug_path", "month")
        .annotate(total=Sum("gpu_hours"))
    )
    rows: dict[tuple, dict] = defaultdict(
        lambda: {
            "total": 0,
            "by_kind": defaultdict(int),
            "granted": 0,
            "rejected": 0,
            "withdrawn": 0,
            "pending": 0,
            "topup_gpu_hours": Decimal("0"),
        }
    )
    for c in counts:
        row = rows[(c["program__slug_path"] or "", c["month"])]
        row["total"] += c["n"]
        row["by_kind"][c["kind"]] += c["n"]
        if c["state"] in GRANTED:
            row["granted"] += c["n"]
        elif c["state"] == State.SUBMITTED:
            row["pending"] += c["n"]
        else:
            row[c["state"]] += c["n"]
    for t in topups:
        rows[(t["program__slug_path"] or "", t["month"])]["topup_gpu_hours"] = t["total"] or 0
    ordered = sorted(rows.items(), key=lambda kv: (-kv[0][1].timestamp(), kv[0][0]))
    return [
        {
            "program": program or "(no program)",
            "month": month,
            **{**row, "by_kind": dict(row["by_kind"])},
        }
        for (program, month), row in ordered
    ]
