"""How the CLI prints: Rich on stdout, colour only on a terminal (and never with NO_COLOR);
``--json`` prints the server's data unchanged, for scripts."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys

import click

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


def console():
    """A console for this moment's stdout (click's test runner swaps it). Piped output gets
    a wide fixed width, so a table is never cut for grep or awk."""
    from rich.console import Console  # Rich only when something is drawn: completion stays fast

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


def show(renderable) -> None:
    """Print for a person; piped, without the trailing blanks Rich pads table cells with."""
    out = console()
    if out.is_terminal:
        out.print(renderable)
        return
    with out.capture() as captured:
        out.print(renderable)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


NUMERIC = {"ID", "GPUS", "POS", "GRANT", "USED", "HELD", "LEFT", "USED%", "BURN/DAY", "SHARE"}


def table(*columns: str, flexible: str | None = None):
    """A borderless table, one line per row. The ``flexible`` column is cut (…) when the
    terminal is narrow; the others keep their width, so ids and states are never cut."""
    from rich.table import Table

    grid = Table(
        box=None, pad_edge=False, header_style="bold", show_edge=False, expand=bool(flexible)
    )
    for name in columns:
        grid.add_column(
            name,
            justify="right" if name in NUMERIC else "left",
            no_wrap=True,
            overflow="ellipsis",
            ratio=1 if name == flexible else None,  # it alone takes, or gives up, the room
        )
    return grid


KEEP = {"ID", "STATE", "GPUS", "POS", "PATH", "LEFT", "PROJECT"}


def keep_whole(grid):
    """After the rows are in: the columns a reader needs whole (an id cut to "1…" is worse
    than none) get their widest cell as minimum width; the others give up the room."""
    from rich.text import Text

    for column in grid.columns:
        if column.header in KEEP:
            cells = [Text.from_markup(str(c)).cell_len for c in column._cells]
            column.min_width = max([len(str(column.header)), *cells])
    return grid


def node_ranges(names: list[str]) -> str:
    """``jupiter-69 … jupiter-76`` as Slurm writes them: ``jupiter-[69-76]``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        prefix, dash, index = name.rpartition("-")
        if dash and index.isdigit():
            groups.setdefault(prefix, []).append(index)
        else:
            groups.setdefault(name, [])
    parts = []
    for prefix, indexes in groups.items():
        if not indexes:
            parts.append(prefix)
        elif len(indexes) == 1:
            parts.append(f"{prefix}-{indexes[0]}")
        else:
            parts.append(f"{prefix}-[{_ranges(indexes)}]")
    return ",".join(parts)


def _ranges(indexes: list[str]) -> str:
    width = len(indexes[0])
    numbers = sorted({int(i) for i in indexes})
    spans, start, last = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == last + 1:
            last = n
            continue
        a, b = f"{start:0{width}d}", f"{last:0{width}d}"
        spans.append(a if start == last else f"{a}-{b}")
        if n is not None:
            start = last = n
    return ",".join(spans)


def state(text: str | None) -> str:
    text = text or ""
    style = STATE_STYLE.get(text)
    return f"[{style}]{text}[/]" if style else text


def when(value: str | None, relative_to: dt.datetime | None = None) -> str:
    """An ISO time from the API in the reader's local time: ``14:05`` today, else the date."""
    moment = _local(value)
    if not isinstance(moment, dt.datetime):
        return moment
    now = relative_to or dt.datetime.now().astimezone()
    if moment.date() == now.date():
        return moment.strftime("%H:%M")
    if moment.year == now.year:
        return moment.strftime("%b %d %H:%M")
    return moment.strftime("%Y-%m-%d %H:%M")


def full_time(value: str | None) -> str:
    moment = _local(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z") if isinstance(moment, dt.datetime) else moment


def _local(value: str | None) -> dt.datetime | str:
    """An ISO time from the API as a time in the reader's zone; what does not parse as is."""
    if not value:
        return ""
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return value


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
