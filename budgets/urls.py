from django.urls import path

from budgets.views import node, structure, tree

urlpatterns = [
    path("budgets/", tree.budget_tree, name="budget-tree"),
    path("budgets/transfer/", tree.transfer, name="budget-transfer"),
    path("budgets/<int:pk>/", node.node_detail, name="budget-node"),
    path("budgets/<int:pk>/grant/", tree.set_grant, name="budget-set-grant"),
    path("budgets/<int:pk>/burndown.json", node.node_burndown, name="budget-burndown"),
    path("budgets/<int:pk>/rename/", structure.rename, name="budget-rename"),
    path("budgets/<int:pk>/weight/", structure.set_weight, name="budget-set-weight"),
    path("budgets/<int:pk>/children/", structure.add_child, name="budget-add-child"),
    path("budgets/<int:pk>/move/", structure.move, name="budget-move"),
    path("budgets/<int:pk>/archive/", structure.archive, name="budget-archive"),
]
