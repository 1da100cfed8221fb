"""The tree's structure through the API: create, rename, re-slug, weight, move and archive.

Every refusal answers with the field at fault and leaves the tree, its grants and its audit
trail exactly as they were.
"""

import pytest

from budgets import services
from budgets.models import AuditAction, AuditEntry, BudgetNode
from tests.budgets.helpers import role_cases, snapshot

pytestmark = pytest.mark.django_db

API = "/api/v1/budgets/"


def _post(client, url, body):
    return client.post(url, body, content_type="application/json")


def _patch(client, node, body):
    return client.patch(f"{API}{node.pk}/", body, content_type="application/json")


def _act(client, action, tree, ablations):
    if action == "create":
        body = {"parent": tree.olmo.pk, "name": "Evals", "grant_gpu_hours": 100, "reason": "r"}
        return _post(client, API, body)
    if action == "rename":
        return _patch(client, ablations, {"name": "Ablation studies", "slug": "abl"})
    if action == "weight":
        return _patch(client, ablations, {"weight": 5})
    if action == "move":
        return _post(client, f"{API}{ablations.pk}/move/", {"parent": tree.tulu.pk})
    return _post(client, f"{API}{ablations.pk}/archive/", {"reason": "done"})


ACTIONS = ["create", "rename", "weight", "move", "archive"]
# Expected status per persona, in the order of ACTIONS. The targets sit under nlp/olmo:
# a project lead of olmo builds below it but cannot see tulu (the move's destination).
MATRIX = {
    "leader": [201, 200, 200, 200, 200],
    "manager": [201, 200, 200, 200, 200],
    "project_lead": [201, 200, 200, 404, 200],
    "researcher": [403, 403, 403, 403, 403],
    "cluster_admin": [403, 403, 403, 403, 403],
    "other_manager": [404, 404, 404, 404, 404],
    "outsider": [404, 404, 404, 404, 404],
}
CASES = role_cases(MATRIX, ACTIONS)


@pytest.mark.parametrize(("who", "action", "expected"), CASES)
def test_each_structure_action_is_allowed_or_refused_by_role(
    client, personas, budget_tree, ablations, who, action, expected
):
    user = personas[who]
    client.force_login(user)
    before = snapshot()
    response = _act(client, action, budget_tree, ablations)
    assert response.status_code == expected
    if expected < 300:
        assert AuditEntry.objects.filter(actor=user).exists()
    else:
        assert snapshot() == before
        assert response.json()["message"]


def test_creating_a_child_with_a_grant_writes_both_audit_rows(client, manager, budget_tree):
    client.force_login(manager)
    body = {"parent": budget_tree.nlp.pk, "name": "Safety evals", "grant_gpu_hours": "750"}
    response = _post(client, API, {**body, "reason": "new team"})
    created = response.json()
    assert response.status_code == 201
    assert (created["path"], created["parent"], created["grant_gpu_hours"]) == (
        "nlp/safety-evals",
        budget_tree.nlp.pk,
        750,
    )
    rows = AuditEntry.objects.filter(node_id=created["id"], actor=manager)
    assert sorted(rows.values_list("action", "new", "reason")) == [
        (AuditAction.CREATE, "Safety evals", "new team"),
        (AuditAction.SET_GRANT, "750.00", "new team"),
    ]


def test_a_child_can_be_created_without_a_grant_and_with_its_own_slug(client, leader, budget_tree):
    client.force_login(leader)
    response = _post(client, API, {"parent": budget_tree.root.pk, "name": "Robotics", "slug": "rb"})
    assert response.status_code == 201
    assert (response.json()["path"], response.json()["grant_gpu_hours"]) == ("rb", 0)


def test_renaming_a_slug_repaths_the_whole_subtree(client, leader, budget_tree):
    client.force_login(leader)
    response = _patch(client, budget_tree.nlp, {"slug": "lm", "reason": "new name"})
    assert response.status_code == 200
    assert response.json()["path"] == "lm"
    assert BudgetNode.objects.get(pk=budget_tree.olmo.pk).slug_path == "lm/olmo"
    audit = AuditEntry.objects.get(node=budget_tree.nlp, action=AuditAction.RENAME)
    assert (audit.field, audit.old, audit.new, audit.reason) == ("slug", "nlp", "lm", "new name")


def test_a_name_alone_keeps_the_path(client, manager, budget_tree):
    client.force_login(manager)
    response = _patch(client, budget_tree.tulu, {"name": "Tülu 3"})
    assert (response.json()["name"], response.json()["path"]) == ("Tülu 3", "nlp/tulu")


def test_a_weight_overrides_the_share_and_null_clears_it(client, manager, budget_tree):
    client.force_login(manager)
    weighted = _patch(client, budget_tree.tulu, {"weight": "3000"}).json()
    assert (weighted["weight"], weighted["share"]) == (3000, pytest.approx(0.5))
    cleared = _patch(client, budget_tree.tulu, {"weight": None}).json()
    assert (cleared["weight"], cleared["share"]) == (None, pytest.approx(0.4))
    assert list(
        AuditEntry.objects.filter(node=budget_tree.tulu, action=AuditAction.SET_WEIGHT)
        .order_by("id")
        .values_list("old", "new")
    ) == [("", "3000.00"), ("3000.00", "")]


def test_one_patch_can_rename_and_regrant_together(client, leader, budget_tree):
    client.force_login(leader)
    response = _patch(
        client, budget_tree.tulu, {"name": "Tulu", "grant_gpu_hours": 2500, "version": 1}
    )
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["grant_gpu_hours"]) == ("Tulu", 2500)


def test_moving_a_node_changes_its_parent_and_path(client, manager, budget_tree, ablations):
    client.force_login(manager)
    response = _post(
        client, f"{API}{ablations.pk}/move/", {"parent": budget_tree.tulu.pk, "reason": "owner"}
    )
    assert response.status_code == 200
    assert (response.json()["path"], response.json()["parent"]) == (
        "nlp/tulu/ablations",
        budget_tree.tulu.pk,
    )
    audit = AuditEntry.objects.get(node=ablations, action=AuditAction.MOVE)
    assert (audit.actor, audit.old, audit.new, audit.reason) == (
        manager,
        "nlp/olmo",
        "nlp/tulu",
        "owner",
    )


def test_archiving_hides_the_node_from_the_list(client, leader, budget_tree, ablations):
    client.force_login(leader)
    response = _post(client, f"{API}{ablations.pk}/archive/", {"reason": "finished"})
    assert response.json() == {
        "id": ablations.pk,
        "name": "Ablations",
        "path": "nlp/olmo/ablations",
        "archived": True,
    }
    paths = [r["path"] for r in client.get(API).json()["results"]]
    assert "nlp/olmo/ablations" not in paths
    assert AuditEntry.objects.filter(node=ablations, action=AuditAction.ARCHIVE).count() == 1


# (how to call, field at fault, status). The tree: nlp 6,000 holds olmo 3,000 + tulu 2,000;
# vision 3,000 holds segmentation 1,000.
DROP = object()
BAD_CREATES = [
    ({"parent": DROP, "name": "X"}, "parent", 400),
    ({"parent": None, "name": "X"}, "parent", 400),
    ({"parent": "abc", "name": "X"}, "parent", 400),
    ({"parent": 999_999, "name": "X"}, "parent", 404),
    ({"name": DROP}, "name", 400),
    ({"name": ""}, "name", 400),
    ({"name": "   "}, "name", 400),
    ({"name": "x" * 121}, "name", 400),
    ({"name": "Olmo again", "slug": "olmo"}, "slug", 400),
    ({"name": "Tulu"}, "slug", 400),  # slugifies to tulu, already a sibling
    ({"name": "X", "slug": "!!!"}, "slug", 400),
    ({"name": "X", "grant_gpu_hours": -5}, "grant_gpu_hours", 400),
    ({"name": "X", "grant_gpu_hours": "lots"}, "grant_gpu_hours", 400),
    ({"name": "X", "grant_gpu_hours": 1500}, "grant_gpu_hours", 400),  # 1,000 free in nlp
    ({"name": "X", "grant_gpu_hours": "1000000000"}, "grant_gpu_hours", 400),
]


@pytest.mark.parametrize(("body", "field", "status"), BAD_CREATES)
def test_a_bad_create_names_the_field_and_creates_nothing(
    client, leader, budget_tree, body, field, status
):
    client.force_login(leader)
    before = snapshot()
    body = {k: v for k, v in {"parent": budget_tree.nlp.pk, **body}.items() if v is not DROP}
    response = _post(client, API, body)
    assert (response.status_code, response.json()["field"]) == (status, field)
    assert snapshot() == before


BAD_PATCHES = [
    ({"name": ""}, "name", 400),
    ({"name": "y" * 121}, "name", 400),
    ({"slug": "olmo"}, "slug", 400),  # olmo is tulu's sibling
    ({"slug": "???"}, "slug", 400),
    ({"weight": -1}, "weight", 400),
    ({"weight": "heavy"}, "weight", 400),
    ({}, "grant_gpu_hours", 400),
    ({"reason": "nothing else"}, "grant_gpu_hours", 400),
    # Several changes go through together or not at all: the rename is undone too.
    ({"name": "Renamed", "grant_gpu_hours": 99_999}, "grant_gpu_hours", 400),
    ({"name": "Renamed", "weight": 2, "grant_gpu_hours": -1}, "grant_gpu_hours", 400),
    ({"name": "Renamed", "grant_gpu_hours": 10, "version": 7}, "grant_gpu_hours", 409),
]


@pytest.mark.parametrize(("body", "field", "status"), BAD_PATCHES)
def test_a_bad_patch_names_the_field_and_changes_nothing(
    client, leader, budget_tree, body, field, status
):
    client.force_login(leader)
    before = snapshot()
    response = _patch(client, budget_tree.tulu, body)
    assert (response.status_code, response.json()["field"]) == (status, field)
    assert snapshot() == before


@pytest.fixture
def vision_olmo(budget_tree):
    """A second "olmo", under vision, so moving nlp/olmo there would clash."""
    services.set_grant(None, budget_tree.vision, 3_000)
    return services.create_node(None, budget_tree.vision, "Vision OLMo", "olmo")


BAD_MOVES = [
    ("nlp", "olmo", "parent", 400),  # under its own descendant
    ("nlp", "nlp", "parent", 400),  # under itself
    ("root", "nlp", "parent", 400),  # the root stays the root
    ("olmo", "vision", "parent", 400),  # vision has 2,000 free, olmo holds 3,000
    ("segmentation", "nlp", "parent", 400),  # nlp has 1,000 free: exactly segmentation's
    ("tulu", "missing", "parent", 404),
    ("tulu", "junk", "parent", 400),
]


@pytest.mark.parametrize(("node", "parent", "field", "status"), BAD_MOVES)
def test_a_bad_move_names_the_field_and_moves_nothing(
    client, leader, budget_tree, node, parent, field, status
):
    if node == "segmentation":
        # Take nlp to the brim, so one more grant of any size no longer fits.
        services.set_grant(None, budget_tree.tulu, 3_000)
    target = {"missing": 999_999, "junk": "x"}.get(parent) or getattr(budget_tree, parent).pk
    client.force_login(leader)
    before = snapshot()
    response = _post(client, f"{API}{getattr(budget_tree, node).pk}/move/", {"parent": target})
    assert (response.status_code, response.json()["field"]) == (status, field)
    assert snapshot() == before


def test_a_move_onto_a_sibling_with_the_same_slug_is_refused(
    client, leader, budget_tree, vision_olmo
):
    services.set_grant(None, budget_tree.vision, 4_000)  # room enough, so only the slug clashes
    client.force_login(leader)
    before = snapshot()
    response = _post(client, f"{API}{budget_tree.olmo.pk}/move/", {"parent": budget_tree.vision.pk})
    assert (response.status_code, response.json()["field"]) == (400, "slug")
    assert snapshot() == before


def test_a_manager_cannot_move_a_node_into_another_program(client, manager, budget_tree):
    client.force_login(manager)
    before = snapshot()
    response = _post(
        client, f"{API}{budget_tree.tulu.pk}/move/", {"parent": budget_tree.segmentation.pk}
    )
    assert (response.status_code, response.json()["field"]) == (404, "parent")
    assert snapshot() == before


def test_a_manager_cannot_move_a_node_up_to_the_organisation(client, manager, budget_tree):
    client.force_login(manager)
    before = snapshot()
    response = _post(client, f"{API}{budget_tree.tulu.pk}/move/", {"parent": budget_tree.root.pk})
    assert (response.status_code, response.json()["field"]) == (404, "parent")
    assert snapshot() == before


def test_a_manager_cannot_create_in_another_program(client, manager, budget_tree):
    client.force_login(manager)
    before = snapshot()
    response = _post(client, API, {"parent": budget_tree.vision.pk, "name": "Sneaky"})
    assert (response.status_code, response.json()["field"]) == (404, "parent")
    assert snapshot() == before


def test_a_project_lead_cannot_create_beside_their_project(client, project_lead, budget_tree):
    client.force_login(project_lead)
    response = _post(client, API, {"parent": budget_tree.nlp.pk, "name": "Beside"})
    assert (response.status_code, response.json()["field"]) == (404, "parent")


def test_a_researcher_cannot_create_under_their_own_project(client, researcher, budget_tree):
    client.force_login(researcher)
    before = snapshot()
    response = _post(client, API, {"parent": budget_tree.olmo.pk, "name": "Mine"})
    assert (response.status_code, response.json()["field"]) == (403, "parent")
    assert snapshot() == before


def test_a_node_that_holds_a_grant_cannot_be_archived(client, leader, budget_tree):
    client.force_login(leader)
    before = snapshot()
    response = _post(client, f"{API}{budget_tree.tulu.pk}/archive/", {})
    assert (response.status_code, response.json()["field"]) == (400, "grant_gpu_hours")
    assert snapshot() == before


def test_a_node_funding_running_jobs_cannot_be_archived(client, leader, budget_tree, ablations):
    services.hold_lien(ablations, job_ref=42, cost_gpu_seconds=3600, require_funds=False)
    client.force_login(leader)
    before = snapshot()
    response = _post(client, f"{API}{ablations.pk}/archive/", {})
    assert (response.status_code, response.json()["field"]) == (400, "node")
    assert "funds running jobs" in response.json()["message"]
    assert snapshot() == before


def test_the_root_cannot_be_archived(client, leader, budget_tree):
    client.force_login(leader)
    response = _post(client, f"{API}{budget_tree.root.pk}/archive/", {})
    assert (response.status_code, response.json()["field"]) == (400, "node")


def test_an_archived_node_is_gone_for_every_further_action(client, leader, budget_tree, ablations):
    client.force_login(leader)
    _post(client, f"{API}{ablations.pk}/archive/", {})
    assert _post(client, f"{API}{ablations.pk}/archive/", {}).status_code == 404
    assert _patch(client, ablations, {"name": "Back"}).status_code == 404
    response = _post(client, API, {"parent": ablations.pk, "name": "Under the archived"})
    assert (response.status_code, response.json()["field"]) == (404, "parent")


def test_the_schema_documents_the_structure_endpoints(admin_client, budget_tree):
    schema = admin_client.get("/api/schema/").content.decode()
    assert "/api/v1/budgets/{id}/move/" in schema
    assert "/api/v1/budgets/{id}/archive/" in schema
    assert "NodeCreate" in schema
    assert "NodeUpdate" in schema
