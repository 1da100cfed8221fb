"""The home page's scheduling panel: the user's active jobs, where each one stands."""

from django.utils import timezone

PANEL_LIMIT = 10


def home_panel(user):
    from scheduling.models import Job

    if not user.is_authenticated:
        return None
    jobs = list(Job.objects.for_home_panel(user)[:PANEL_LIMIT])
    return {
        "title": "My active jobs",
        "template": "scheduling/panel.html",
        "context": {"jobs": jobs, "now": timezone.now(), "limit": PANEL_LIMIT},
    }
