import pytest

pytestmark = pytest.mark.django_db


def test_operators_can_read_but_not_edit_grants_in_the_admin(admin_client, budget_tree):
    assert admin_client.get("/admin/budgets/grant/").status_code == 200
    assert admin_client.get("/admin/budgets/auditentry/").status_code == 200
    assert admin_client.get("/admin/budgets/grant/add/").status_code == 403


def test_operators_edit_roles_and_cost_factors_in_the_admin(admin_client, budget_tree):
    assert admin_client.get("/admin/budgets/role/add/").status_code == 200
    assert admin_client.get("/admin/budgets/gputype/add/").status_code == 200
