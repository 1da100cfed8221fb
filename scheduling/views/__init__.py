"""Scheduling pages, one module per feature. Each view has one URL and two renderings: the
full page, or (for htmx) the named partial of the same template, so plain links and form
posts keep working without JavaScript."""

from django.shortcuts import render


def render_page(request, template: str, partial: str, context: dict, status: int = 200):
    """The full page, or only `partial` when htmx asked (a swap or a poll)."""
    name = f"{template}#{partial}" if request.htmx else template
    return render(request, name, context, status=status)
