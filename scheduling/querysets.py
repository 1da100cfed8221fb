from django.db import models


class JobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=["pending", "running", "preempted"])

    def running(self):
        return self.filter(state="running")

    def pending(self):
        return self.filter(state="pending")

    def for_queue_page(self, cluster):
        return (
            self.filter(cluster=cluster, state="pending")
            .select_related("owner", "project")
            .order_by("queue_position", "submitted_at", "id")
        )

    def for_user_page(self, user):
        return self.filter(owner=user).select_related("cluster", "project")

    def for_running_overview(self):
        return self.filter(state="running").select_related("owner", "project", "cluster")
