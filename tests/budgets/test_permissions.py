"""Role × action matrix: who may see and change which budget, through pages and the API.

404 means "outside your scope" (a manager does not learn another program's nodes exist);
403 means "you can see it but not change it".
"""

import pytest

from budgets import access

pytestmark = pytest.mark.django_db


def _login(client, request, persona):
    user = request.getfixturevalue(persona)
    client.force_login(user)
    return user


@pytest.mark.parametrize(
    "persona, expected",
    [
        ("leader", {"", "nlp", "nlp/olmo", "nlp/tulu", "vision", "vision/segmentation"}),
        ("manager", {"nlp", "nlp/olmo", "nlp/tulu"}),
        ("other_manager", {"vision", "vision/segmentation"}),
        ("project_lead", {"nlp/olmo"}),
        ("researcher", {"nlp/olmo"}),
        ("outsider", set()),
        ("cluster_admin", {"", "nlp", "nlp/olmo", "nlp/tulu", "vision", "vision/segmentation"}),
    ],
)
def test_each_role_lists_exactly_the_budgets_in_its_scope(client, request, persona, expected):
    _login(client, request, persona)
    listed = {row["path"] for row in client.get("/api/v1/budgets/").json()["results"]}
    page = client.get("/budgets/").content.decode()
    assert listed == expected
    for path in {"nlp/tulu", "vision/segmentation"} - expected:
        assert f'data-path="{path}"' not in page


@pytest.mark.parametrize(
    "persona, nlp_page, olmo_grant_post, nlp_grant_patch, transfer",
    [
        ("leader", 200, 302, 200, 201),
        ("manager", 200, 302, 403, 201),
        ("other_manager", 404, 404, 404, 404),
        ("project_lead", 404, 403, 404, 403),
        ("researcher", 404, 403, 404, 403),
        ("outsider", 404, 404, 404, 404),
        ("cluster_admin", 200, 403, 403, 403),
    ],
)
def test_role_by_action_matrix(
    client, request, budget_tree, persona, nlp_page, olmo_grant_post, nlp_grant_patch, transfer
):
    _login(client, request, persona)
    t = budget_tree
    assert client.get(f"/budgets/{t.nlp.pk}/").status_code == nlp_page
    assert client.get(f"/budgets/{t.nlp.pk}/burndown.json").status_code == nlp_page
    posted = client.post(f"/budgets/{t.olmo.pk}/grant/", {"grant_gpu_hours": "2500"})
    assert posted.status_code == olmo_grant_post
    patched = client.patch(
        f"/api/v1/budgets/{t.nlp.pk}/", {"grant_gpu_hours": "5500"}, content_type="application/json"
    )
    assert patched.status_code == nlp_grant_patch
    moved = client.post(
        "/api/v1/budgets/transfers/",
        {"source": t.olmo.pk, "target": t.tulu.pk, "gpu_hours": "100"},
        content_type="application/json",
    )
    assert moved.status_code == transfer


def test_a_manager_cannot_change_another_programs_grant_through_a_transfer(
    client, manager, budget_tree
):
    client.force_login(manager)
    response = client.post(
        "/api/v1/budgets/transfers/",
        {"source": budget_tree.olmo.pk, "target": budget_tree.segmentation.pk, "gpu_hours": "1"},
        content_type="application/json",
    )
    assert response.status_code == 404
    assert response.json()["field"] == "target"


def test_a_researcher_submits_only_into_their_leaf_projects(researcher, manager, budget_tree):
    assert list(access.user_projects(researcher)) == [budget_tree.olmo]
    assert set(access.user_projects(manager)) == {budget_tree.olmo, budget_tree.tulu}


def test_cluster_admin_comes_from_the_group_or_superuser_too(budget_tree, outsider):
    from django.contrib.auth.models import Group

    assert not access.is_cluster_admin(outsider)
    outsider.groups.add(Group.objects.create(name=access.CLUSTER_ADMIN_GROUP))
    access.forget_roles(outsider)
    assert access.is_cluster_admin(outsider)
    assert access.visible_nodes(outsider).count() == 6


def test_unauthenticated_requests_are_turned_away(client, budget_tree):
    assert client.get("/budgets/").status_code == 302
    assert client.get("/api/v1/budgets/").status_code in {401, 403}
