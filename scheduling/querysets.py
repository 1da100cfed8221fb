from django.db import models

ACTIVE_STATES = ("pending", "running", "preempted")


class JobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

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

    def running_on_queue_page(self, cluster):
        """The running half of a cluster's queue page: what holds the GPUs, oldest first."""
        return (
            self.filter(cluster=cluster, state="running")
            .select_related("owner", "project")
            .order_by("started_at", "id")
        )

    def for_user_page(self, user):
        return self.filter(owner=user).select_related("cluster", "project")

    def for_home_panel(self, user):
        """The home panel's active jobs: waiting ones by queue position, then running."""
        return self.for_user_page(user).active().order_by("state", "queue_position", "-id")

    def for_job_page(self):
        return self.select_related("owner", "project", "cluster")

    def for_running_overview(self):
        return self.filter(state="running").select_related("owner", "project", "cluster")

    def for_wait_times(self, since):
        """(gpus, submitted_at, first_started_at) of jobs that first started since `since`: the
        operations page's wait-time percentiles, computed in Python from one query."""
        return (
            self.filter(first_started_at__gte=since)
            .values_list("gpus", "submitted_at", "first_started_at")
            .order_by()  # no sort: the percentiles sort the waits themselves
        )

    def for_occupancy(self):
        """(cluster id, gpus, funded, nodes) of every running job: occupancy per cluster and
        per node without loading model instances."""
        return self.filter(state="running").values_list("cluster_id", "gpus", "funded", "nodes")
