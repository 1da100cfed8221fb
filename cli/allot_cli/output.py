"""How the CLI prints: Rich on stdout, colour only on a terminal (and never with NO_COLOR);
``--json`` prints the server's data unchanged, for scripts."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys

import click
from rich.console import Console
from rich.table import Table

STATE_STYLE = {
    "pending": "yellow",
    "running": "green",
    "preempted": "magenta",
    "completed": "dim",
    "failed": "red",
    "cancelled": "dim",
    "submitted": "yellow",
    "approved": "green",
    "active": "green",
    "rejected": "red",
    "withdrawn": "dim",
    "expired": "dim",
}


def console() -> Console:
    """A console for this moment's stdout (click's test runner swaps it). Piped output gets
    a wide fixed width, so a table is never cut for grep or awk."""
    out = sys.stdout
    terminal = out.isatty()
    width = None if terminal else int(os.environ.get("COLUMNS") or 200)
    return Console(
        file=out,
        width=width,
        no_color=not terminal or bool(os.environ.get("NO_COLOR")),
        highlight=False,
        soft_wrap=not terminal,
    )


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


NUMERIC = {"ID", "GPUS", "POS", "GRANT", "USED", "HELD", "LEFT", "USED%", "BURN/DAY", "SHARE"}


def table(*columns: str) -> Table:
    grid = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for name in columns:
        grid.add_column(name, justify="right" if name in NUMERIC else "left", no_wrap=True)
    return grid


def state(text: str | None) -> str:
    text = text or ""
    style = STATE_STYLE.get(text)
    return f"[{style}]{text}[/]" if style else text


def when(value: str | None, relative_to: dt.datetime | None = None) -> str:
    """An ISO time from the API in the reader's local time: ``14:05`` today, else the date."""
    if not value:
        return ""
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return value
    now = relative_to or dt.datetime.now().astimezone()
    if moment.date() == now.date():
        return moment.strftime("%H:%M")
    if moment.year == now.year:
        return moment.strftime("%b %d %H:%M")
    return moment.strftime("%Y-%m-%d %H:%M")


def full_time(value: str | None) -> str:
    if not value:
        return ""
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return value
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z")


def hours(value) -> str:
    if value is None or value == "":
        return ""
    try:
        return f"{float(value):,.1f}"
    except (TypeError, ValueError):
        return str(value)


def escape(text) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape("" if text is None else str(text))
