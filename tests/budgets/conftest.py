import pytest

from budgets import services


@pytest.fixture
def ablations(budget_tree):
    """An empty project under olmo: no grant, so it can be archived or moved anywhere."""
    return services.create_node(None, budget_tree.olmo, "Ablations", "ablations")
