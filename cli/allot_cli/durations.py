"""Durations as people type them: ``90m``, ``2h``, ``1h30m``, ``45s``, ``1d``, or plain
seconds (``5400``)."""

from __future__ import annotations

import re

import click

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> int:
    """Seconds in ``text``; ValueError when it is not a duration."""
    cleaned = str(text).strip().lower().replace(" ", "")
    if cleaned.isdigit():
        return int(cleaned)
    if not cleaned or PART.sub("", cleaned):
        raise ValueError(f"{text!r} is not a duration (examples: 90m, 2h, 1h30m, 3600)")
    units = [unit for _, unit in PART.findall(cleaned)]
    if len(set(units)) != len(units):
        raise ValueError(f"{text!r} repeats a unit")
    seconds = sum(float(n) * UNITS[u] for n, u in PART.findall(cleaned))
    if seconds != int(seconds):
        raise ValueError(f"{text!r} is not a whole number of seconds")
    return int(seconds)


def format_duration(seconds: float | int | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    if not hours:
        return f"{minutes}m"
    return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"


class Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
