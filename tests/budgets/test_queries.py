"""The tree page and the API list cost a fixed number of queries, whatever the tree's size."""

import pytest

from budgets import services
from tests.budgets.factories import UsageEntryFactory
from tests.budgets.helpers import queries_to_get

pytestmark = pytest.mark.django_db

# session, user, roles with the cluster-admins group, nodes+grants, usage, liens, inbox badge
TREE_PAGE_QUERIES = 7
# the same, plus the count, the page of visible nodes and the last 24 hours' usage (the burn)
API_LIST_QUERIES = 9


def _grow(budget_tree, leader, programs=3, projects=6):
    """Add programs × projects nodes with grants and usage."""
    services.set_grant(leader, budget_tree.root, 100_000)
    for p in range(programs):
        program = services.create_node(leader, budget_tree.root, f"Program {p}")
        services.set_grant(leader, program, 1_000)
        for q in range(projects):
            project = services.create_node(leader, program, f"Project {q}")
            services.set_grant(leader, project, 100)
            UsageEntryFactory(node=project, cost_gpu_seconds=3600)


@pytest.mark.parametrize("url", ["/budgets/", "/api/v1/budgets/"])
def test_queries_do_not_grow_with_the_number_of_nodes(client, leader, budget_tree, url):
    client.force_login(leader)
    small = queries_to_get(client, url)
    _grow(budget_tree, leader)
    assert queries_to_get(client, url) == small


def test_the_tree_page_query_count_is_pinned(
    client, leader, budget_tree, django_assert_num_queries
):
    _grow(budget_tree, leader)
    client.force_login(leader)
    with django_assert_num_queries(TREE_PAGE_QUERIES):
        client.get("/budgets/")


def test_the_api_list_query_count_is_pinned(client, leader, budget_tree, django_assert_num_queries):
    _grow(budget_tree, leader)
    client.force_login(leader)
    with django_assert_num_queries(API_LIST_QUERIES):
        client.get("/api/v1/budgets/")
