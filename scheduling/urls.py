from django.urls import path

from scheduling.views import explain, jobs, operations, queue, running

urlpatterns = [
    path("jobs/", jobs.job_list, name="job-list"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("jobs/<int:pk>/why/", explain.job_explain, name="job-explain"),
    path("queue/", queue.queue_index, name="queue-index"),
    path("queue/<slug:name>/", queue.cluster_queue, name="cluster-queue"),
    path("running/", running.running_overview, name="running-overview"),
    path("operations/", operations.operations, name="operations"),
    path("operations/nodes/<int:pk>/drain/", operations.node_drain, name="node-drain"),
]
