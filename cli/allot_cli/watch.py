"""``--watch``: refresh in place on a terminal (Rich Live), one block after another when piped;
with ``--json``, one JSON document per line. Ctrl-C ends it quietly (exit 0)."""

from __future__ import annotations

import datetime as dt
import json
import time

import click
from rich.console import Group
from rich.live import Live
from rich.text import Text

from allot_cli.output import console, print_json, show


def watch_loop(fetch, render, as_json: bool, watch: bool, interval: float, done=None):
    data = fetch()
    if not watch:
        if as_json:
            print_json(data)
        else:
            show(render(data))
        return
    finished = done or (lambda _data: False)
    try:
        out = console()
        if as_json or not out.is_terminal:
            _stream(fetch, render, data, as_json, interval, finished)
            return
        with Live(_framed(render(data), interval), console=out, auto_refresh=False) as live:
            while not finished(data):
                time.sleep(interval)
                data = fetch()
                live.update(_framed(render(data), interval), refresh=True)
    except KeyboardInterrupt:
        return


def _stream(fetch, render, data, as_json, interval, finished):
    while True:
        if as_json:
            click.echo(json.dumps(data, default=str), nl=True)
        else:
            show(_framed(render(data), interval))
        if finished(data):
            return
        time.sleep(interval)
        data = fetch()


def _framed(body, interval):
    stamp = dt.datetime.now().astimezone().strftime("%H:%M:%S")
    header = Text(f"every {interval:g}s, Ctrl-C to stop · {stamp}", style="dim")
    return Group(header, body)
