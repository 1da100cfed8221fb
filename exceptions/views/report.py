"""Exceptions per program per month: the bargaining that budgets are meant to shrink."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from exceptions.access import visible_requests
from exceptions.report import monthly_by_program


@login_required
def report(request):
    rows = monthly_by_program(visible_requests(request.user))
    return render(request, "exceptions/report.html", {"rows": rows})
