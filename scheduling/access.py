"""Who may see and act on jobs and clusters: the one choke point for pages and endpoints.

A job is visible to its owner, to cluster admins, and to whoever can see its project in the
budget tree (its project's members, the program manager above it, leadership). Unfunded jobs
without a project are visible to their owner, cluster admins and leadership.
"""

from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404

from core.parsing import parse_id
from scheduling.models import Cluster, Job, Node


def visible_jobs(user):
    from budgets.access import is_cluster_admin, is_leadership, visible_nodes

    jobs = Job.objects.all()
    if is_cluster_admin(user):
        return jobs
    scope = Q(owner=user) | Q(project__in=visible_nodes(user).values("pk"))
    if is_leadership(user):
        scope |= Q(project__isnull=True)
    return jobs.filter(scope)


def get_job_for_user(user, pk, write=False) -> Job:
    """The job if the user may see it (404 otherwise); with ``write``, only its owner or a
    cluster admin may act on it (403)."""
    from budgets.access import is_cluster_admin

    try:
        job = visible_jobs(user).select_related("owner", "project", "cluster").get(pk=parse_id(pk))
    except Job.DoesNotExist:
        raise Http404("No such job") from None
    if write and job.owner_id != user.pk and not is_cluster_admin(user):
        raise PermissionDenied("Only the job's owner or a cluster admin can do that")
    return job


def can_see_command(user, job) -> bool:
    """A command holds paths, arguments and, by mistake, secrets: its owner, the leads of its
    project and cluster admins see it; seeing the job (leadership, managers, colleagues) is
    not enough."""
    from budgets.access import is_cluster_admin, leads

    if job.owner_id == user.pk:
        return True
    if is_cluster_admin(user):
        return True
    return job.project_id is not None and leads(user, job.project)


def get_cluster(name_or_pk) -> Cluster:
    pk = parse_id(name_or_pk)
    try:
        if pk is not None:
            return Cluster.objects.get(pk=pk)
        return Cluster.objects.get(name=str(name_or_pk)[:64])
    except Cluster.DoesNotExist:
        raise Http404("No such cluster") from None


def get_node_for_admin(user, pk) -> Node:
    from budgets.access import is_cluster_admin

    if not is_cluster_admin(user):
        raise PermissionDenied("Only cluster admins drain nodes")
    try:
        return Node.objects.select_related("cluster").get(pk=parse_id(pk))
    except Node.DoesNotExist:
        raise Http404("No such node") from None
