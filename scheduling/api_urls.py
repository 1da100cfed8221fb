from rest_framework.routers import SimpleRouter

from scheduling.api import ClusterViewSet, JobViewSet

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("clusters", ClusterViewSet, basename="cluster")

urlpatterns = router.urls
