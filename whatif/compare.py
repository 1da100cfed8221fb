"""Current against proposed, side by side: the rows of the page's table and its chart (an
inline SVG drawn on the server, like the burn-down: no chart library)."""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import mark_safe

PROJECT_FIELDS = (
    "budget_share", "delivered_share", "wait_p50_s", "wait_p95_s", "allocated_gpu_hours",
    "unallocated_gpu_hours", "wasted_gpu_hours",
)  # fmt: skip
SUMMED = ("budget_share", "delivered_share", "allocated_gpu_hours", "unallocated_gpu_hours",
          "wasted_gpu_hours")  # fmt: skip


def node_rows(result: dict) -> list[dict]:
    """One row per node (programs summed from their projects, then each project), each field
    as (current, proposed)."""
    cur, new = result["current"]["projects"], result["proposed"]["projects"]
    paths = sorted(set(cur) | set(new))
    rows, programs = [], {}
    for path in paths:
        top = path.split("/")[0]
        if "/" in path and top not in programs:
            members = [p for p in paths if p.startswith(top + "/")]
            programs[top] = {
                "path": top,
                "program": True,
                **{
                    f: (
                        sum(cur.get(p, {}).get(f, 0.0) for p in members),
                        sum(new.get(p, {}).get(f, 0.0) for p in members),
                    )
                    for f in SUMMED
                },
            }
            rows.append(programs[top])
        a, b = cur.get(path, {}), new.get(path, {})
        rows.append({"path": path, "program": False,
                     **{f: (a.get(f, 0.0), b.get(f, 0.0)) for f in PROJECT_FIELDS}})  # fmt: skip
    return rows


def summary_rows(result: dict) -> list[tuple[str, float, float, str]]:
    """Organisation-wide: (label, current, proposed, unit)."""
    cur, new = result["current"], result["proposed"]

    def wasted(r):
        return sum(p.get("wasted_gpu_hours", 0.0) for p in r["projects"].values())

    rows = [
        ("Utilisation", cur["utilization"], new["utilization"], "pct"),
        ("Unfunded GPU-hours", cur["unfunded_gpu_hours"], new["unfunded_gpu_hours"], "h"),
        ("Wasted GPU-hours (preemption)", wasted(cur), wasted(new), "h"),
        ("Preemptions", cur["jobs"]["preemptions"], new["jobs"]["preemptions"], "n"),
    ]
    sizes = sorted(set(cur.get("wait_by_size", {})) | set(new.get("wait_by_size", {})))
    for size in sizes:
        a, b = cur["wait_by_size"].get(size, {}), new["wait_by_size"].get(size, {})
        label = f"{size} GPU" + ("" if size == "1" else "s")
        rows.append((f"Wait p50, {label}", a.get("wait_p50_s", 0), b.get("wait_p50_s", 0), "s"))
        rows.append((f"Wait p95, {label}", a.get("wait_p95_s", 0), b.get("wait_p95_s", 0), "s"))
    return rows


def chart_svg(result: dict, width: int = 720) -> str:
    """Per project: its budget share (a grey tick) and delivered share, current (light) and
    proposed (dark), as horizontal bars."""
    cur, new = result["current"]["projects"], result["proposed"]["projects"]
    paths = sorted(set(cur) | set(new))
    left, right, row_h, top = 170, 60, 30, 24
    height = top + row_h * max(1, len(paths)) + 10
    high = max([0.01] + [p.get(f, 0.0) for d in (cur, new) for p in d.values()
                         for f in ("budget_share", "delivered_share")])  # fmt: skip

    def x(v: float) -> float:
        return left + (width - left - right) * v / high

    parts = [
        f'<svg class="whatif-chart" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="Delivered share per project, current and proposed, against budget share">',
        f'<text x="{left}" y="14" font-size="11"><tspan fill="#9fb4ea">■</tspan> current '
        '<tspan fill="#2f5bd3">■</tspan> proposed <tspan fill="#333">|</tspan> proposed '
        "budget share</text>",
    ]
    for i, path in enumerate(paths):
        y = top + i * row_h
        a, b = cur.get(path, {}), new.get(path, {})
        parts.append(
            f'<text x="{left - 6}" y="{y + 15}" text-anchor="end" font-size="11">'
            f"{escape(path)}</text>"
        )
        for k, (value, colour) in enumerate(
            ((a.get("delivered_share", 0.0), "#9fb4ea"), (b.get("delivered_share", 0.0), "#2f5bd3"))
        ):
            parts.append(
                f'<rect x="{left}" y="{y + 3 + k * 11}" width="{x(value) - left:.1f}" '
                f'height="10" fill="{colour}"><title>{escape(path)}: '
                f"{value:.1%} delivered</title></rect>"
            )
        share = b.get("budget_share", 0.0)
        parts.append(
            f'<line x1="{x(share):.1f}" x2="{x(share):.1f}" y1="{y + 1}" y2="{y + 25}" '
            f'stroke="#333" stroke-width="2"><title>budget share {share:.1%}</title></line>'
        )
        parts.append(
            f'<text x="{x(max(share, b.get("delivered_share", 0.0))) + 6:.1f}" y="{y + 23}" '
            f'font-size="10" fill="#5b6475">{b.get("delivered_share", 0.0):.1%}</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 — every interpolated text is escaped or numeric
