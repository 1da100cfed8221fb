from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render

from portal import dashboard


@login_required
def home(request):
    return render(request, "portal/home.html", dashboard.home_context(request.user))


def healthz(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True})
