from rest_framework.routers import SimpleRouter

from exceptions.api import ExceptionViewSet

router = SimpleRouter()
router.register("exceptions", ExceptionViewSet, basename="exception")

urlpatterns = router.urls
