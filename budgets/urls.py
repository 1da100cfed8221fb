from django.urls import path

from budgets.views import node, tree

urlpatterns = [
    path("budgets/", tree.budget_tree, name="budget-tree"),
    path("budgets/transfer/", tree.transfer, name="budget-transfer"),
    path("budgets/<int:pk>/", node.node_detail, name="budget-node"),
    path("budgets/<int:pk>/grant/", tree.set_grant, name="budget-set-grant"),
    path("budgets/<int:pk>/burndown.json", node.node_burndown, name="budget-burndown"),
]
