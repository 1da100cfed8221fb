"""What the commands print for people: Rich renderables built from the API's JSON."""

from __future__ import annotations

import json

from rich.console import Group
from rich.table import Table
from rich.text import Text

from allot_cli.durations import format_duration
from allot_cli.output import (
    escape,
    full_time,
    hours,
    keep_whole,
    node_ranges,
    state,
    table,
    when,
)


def queue_table(jobs: list[dict]):
    if not jobs:
        return Text("No jobs.")
    grid = table(
        "ID",
        "NAME",
        "USER",
        "PROJECT",
        "CLUSTER",
        "GPUS",
        "STATE",
        "POS",
        "START",
        "REASON / NODES",
    )
    for job in jobs:
        reason = job.get("pending_reason") or {}
        if job.get("state") == "running":
            start = when(job.get("started_at"))
            where = node_ranges(job.get("nodes") or [])
        else:
            start = when(job.get("estimated_start"))
            where = reason.get("code") or ""
        grid.add_row(
            str(job["id"]),
            escape(job.get("name")),
            escape(job.get("owner")),
            escape(job.get("project") or "(unfunded)"),
            escape(job.get("cluster")),
            str(job.get("gpus", "")),
            state(job.get("state")),
            str(job.get("queue_position") or ""),
            start,
            escape(where),
        )
    return keep_whole(grid)


def _pairs(rows) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for label, value in rows:
        if value not in (None, "", []):
            grid.add_row(label, value)
    return grid


def status_block(job: dict):
    reason = job.get("pending_reason") or {}
    protected = full_time(job.get("protected_until"))
    if protected and job.get("protection_source"):
        protected += f" ({job['protection_source']})"
    funded = job.get("funded")
    return _pairs(
        [
            ("Job", f"{job['id']}  {escape(job.get('name'))}"),
            ("State", state(job.get("state"))),
            ("Owner", escape(job.get("owner"))),
            ("Project", escape(job.get("project") or "(unfunded)")),
            ("Cluster", escape(job.get("cluster"))),
            ("GPUs", f"{job.get('gpus')} ({job.get('kind', 'batch')})"),
            (
                "Min runtime",
                format_duration(job.get("min_runtime_s"))
                + ("" if job.get("resumable", True) else ", not resumable"),
            ),
            (
                "Funded",
                None
                if funded is None or job.get("state") != "running"
                else ("yes" if funded else "no (unallocated: preemptible at any moment)"),
            ),
            ("Submitted", full_time(job.get("submitted_at"))),
            ("Started", full_time(job.get("started_at"))),
            ("Ended", full_time(job.get("ended_at"))),
            ("Protected until", protected),
            ("Position", str(job["queue_position"]) if job.get("queue_position") else ""),
            ("Waiting", escape(f"{reason.get('code')}: {reason.get('message')}") if reason else ""),
            ("Estimated start", full_time(job.get("estimated_start"))),
            ("Nodes", escape(node_ranges(job.get("nodes") or []))),
            ("Command", escape(job.get("command"))),
            ("Last error", escape(job.get("last_error"))),
        ]
    )


def why_block(job: dict, why: dict):
    parts = [
        Text.from_markup(
            f"[bold]Job {job['id']}[/] {escape(job.get('name'))} — {state(job.get('state'))}"
        )
    ]
    chain = why.get("funding_chain") or []
    if why.get("funded"):
        payer = " › ".join(chain) or escape(why.get("project"))
    elif job.get("state") == "running":
        payer = "nobody: it runs unallocated (free, preemptible at any moment)"
    else:
        payer = escape(why.get("project") or "(unfunded)") + " (charged only while running)"
    rate = (
        f"{why.get('gpu_hours_per_hour', 0):g} GPU-hours per hour "
        f"({why.get('gpus')} × {escape(why.get('gpu_type'))} at {why.get('cost_factor', 0):g})"
    )
    running = job.get("state") == "running"
    protection = "not protected"
    if why.get("protected_until"):
        source = why.get("protection_source") or "contract"
        if source == "contract":
            source = "its minimum-runtime contract"
        verb = "protected until" if why.get("protected") else "protection ended"
        protection = f"{verb} {full_time(why['protected_until'])}, by {escape(source)}"
    reason = job.get("pending_reason") or {}
    so_far = float(why.get("gpu_hours_so_far") or 0)
    rows = [
        ("Paid by", escape(payer)),
        ("Rate", rate if running else ""),
        ("So far", f"{so_far:,.2f} GPU-hours charged" if running or so_far else ""),
        ("Protection", protection if running else ""),
        ("Waiting", escape(f"{reason.get('code')}: {reason.get('message')}") if reason else ""),
        ("Position", str(job["queue_position"]) if job.get("queue_position") else ""),
        ("Estimated start", full_time(job.get("estimated_start"))),
        ("Preemptible by", escape(why.get("preemptible_by")) if running else ""),
        ("Note", escape(why.get("funding_note"))),
    ]
    parts.append(_pairs(rows))
    standing = why.get("standing") or []
    if standing:
        grid = table("LEVEL", "SHARE", "USAGE", "FAIR SHARE")
        for level in standing:
            fair = level.get("level_fair_share")
            grid.add_row(
                escape(level.get("path")),
                _pct(level.get("share")),
                _pct(level.get("usage_share")),
                "∞ (no usage)" if fair is None and "level_fair_share" in level else _num(fair),
            )
        parts += [Text("Standing (share vs usage in the window):", style="bold"), grid]
    return Group(*parts)


def _pct(value) -> str:
    return "" if value is None else f"{100 * float(value):.1f}%"


def _num(value) -> str:
    return "" if value is None else f"{float(value):.2f}"


def budget_table(nodes: list[dict]):
    if not nodes:
        return Text("No budgets visible to you.")
    grid = table("PATH", "GRANT", "USED", "HELD", "LEFT", "USED%", "BURN/DAY", "SHARE")
    for node in nodes:
        grant = float(node.get("grant_gpu_hours") or 0)
        used = float(node.get("used_gpu_hours") or 0)
        fraction = used / grant if grant else (1.0 if used else 0.0)
        left = float(node.get("remaining_gpu_hours") or 0)
        grid.add_row(
            escape(node.get("path") or "(root)"),
            hours(node.get("grant_gpu_hours")),
            hours(node.get("used_gpu_hours")),
            hours(node.get("held_gpu_hours")),
            f"[red]{hours(left)}[/]" if left <= 0 and grant else hours(left),
            f"{100 * fraction:.0f}%",
            hours(node.get("burn_gpu_hours_per_day")),
            _pct(node.get("share")),
        )
    return keep_whole(grid)


def exception_table(rows: list[dict]):
    if not rows:
        return Text("No exception requests.")
    grid = table(
        "ID",
        "KIND",
        "STATE",
        "REQUESTER",
        "WHAT",
        "SUBMITTED",
        "JUSTIFICATION",
        flexible="JUSTIFICATION",
    )
    for row in rows:
        grid.add_row(
            str(row["id"]),
            escape(SHORT_KINDS.get(row.get("kind"), row.get("kind"))),
            state(row.get("state")),
            escape(row.get("requester")),
            escape(exception_what(row)),
            when(row.get("submitted_at")),
            escape(_short(row.get("justification"), 60)),
        )
    return keep_whole(grid)


SHORT_KINDS = {"extended_protection": "protection", "budget_topup": "topup"}


def exception_what(row: dict) -> str:
    kind = row.get("kind")
    if kind == "extended_protection":
        return f"job {row.get('job')}: {row.get('hours')} h protected"
    if kind == "budget_topup":
        return f"{row.get('node')}: +{row.get('gpu_hours')} GPU-hours"
    if kind == "reservation":
        return (
            f"{row.get('gpus')} GPUs on {row.get('cluster')} "
            f"{when(row.get('start'))}–{when(row.get('end'))}"
        )
    return ""


def exception_block(row: dict):
    approvals = ", ".join(
        f"{a.get('approver')} (tier {a.get('tier')})" for a in row.get("approvals") or []
    )
    return _pairs(
        [
            ("Request", f"{row['id']}  {escape(row.get('kind'))}"),
            ("State", state(row.get("state"))),
            ("Requester", escape(row.get("requester"))),
            ("What", escape(exception_what(row))),
            ("Justification", escape(row.get("justification"))),
            (
                "Approvals",
                f"{escape(approvals) or 'none yet'} of {row.get('approvals_required', 1)} needed",
            ),
            (
                "Decided",
                escape(
                    " ".join(
                        filter(None, [full_time(row.get("decided_at")), row.get("decided_by")])
                    )
                ),
            ),
            ("Reason", escape(row.get("reason"))),
            ("Effect", escape(json.dumps(row["effect"]) if row.get("effect") else "")),
        ]
    )


def _short(text, limit=48) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
