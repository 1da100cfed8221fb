from django.urls import path
from rest_framework.routers import SimpleRouter

from budgets.api import BudgetNodeViewSet, TransferView

router = SimpleRouter()
router.register("budgets", BudgetNodeViewSet, basename="budget")

urlpatterns = [
    # Before the router, so "transfers" is never read as a node id.
    path("budgets/transfers/", TransferView.as_view(), name="budget-transfers"),
    *router.urls,
]
