"""Number formatting for budget pages: GPU-hours with thousands separators, percentages."""

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def gpuh(value) -> str:
    """12345.5 → "12,345.5"; whole numbers without decimals."""
    if value in (None, ""):
        return "—"
    value = Decimal(value)
    if value == value.to_integral_value():
        return f"{value:,.0f}"
    return f"{value:,.1f}"


@register.filter
def pct(value) -> str:
    if value in (None, ""):
        return "—"
    return f"{float(value) * 100:.1f} %"


@register.filter
def percent_width(value) -> str:
    """A CSS width for a bar, clamped to 0–100 %."""
    return f"{max(0.0, min(1.0, float(value or 0))) * 100:.1f}%"
