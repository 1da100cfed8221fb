"""Formatting for the what-if comparison: a value by its unit, and the change between two."""

from django import template

register = template.Library()


def _fmt(value, unit: str) -> str:
    value = float(value or 0)
    if unit == "pct":
        return f"{value * 100:.1f} %"
    if unit == "s":
        return f"{value / 3600:,.1f} h"
    if unit == "h":
        return f"{value:,.0f}"
    return f"{value:,.0f}"


@register.filter
def unit(value, kind: str) -> str:
    return _fmt(value, kind)


@register.filter
def delta(pair, kind: str) -> str:
    """(current, proposed) → the signed change, blank when there is none."""
    a, b = (float(v or 0) for v in pair)
    if abs(b - a) < 1e-9:
        return ""
    sign = "+" if b > a else "−"
    return f"{sign}{_fmt(abs(b - a), kind)}"
