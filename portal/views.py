from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from portal import dashboard, health


@login_required
def home(request):
    return render(request, "portal/home.html", dashboard.home_context(request.user))


def healthz(request):
    body, status = health.report()
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    return response
