"""Bad input gets a clear error naming the field and changes nothing."""

import pytest

from budgets import services
from budgets.balances import balances
from budgets.models import AuditEntry, BudgetNode

pytestmark = pytest.mark.django_db


def _patch(client, node, body):
    return client.patch(f"/api/v1/budgets/{node.pk}/", body, content_type="application/json")


def _grant(node):
    return balances([node])[node.pk].grant_gpu_hours


@pytest.mark.parametrize(
    "value, says",
    [
        ("-5", "negative"),
        ("lots", "number"),
        ("1e12", "cap"),
        ("4001", "at most 4,000"),
    ],
)
def test_a_bad_grant_is_refused_with_the_field_named_and_nothing_changes(
    client, leader, budget_tree, value, says
):
    client.force_login(leader)
    before = AuditEntry.objects.count()
    response = _patch(client, budget_tree.olmo, {"grant_gpu_hours": value})
    body = response.json()
    assert response.status_code == 400
    assert body["field"] == "grant_gpu_hours"
    assert says in body["message"]
    assert _grant(budget_tree.olmo) == 3_000
    assert AuditEntry.objects.count() == before


def test_the_cap_on_a_grant_is_configurable(client, leader, budget_tree, settings):
    settings.ALLOT_MAX_GRANT_GPU_HOURS = 2_500
    client.force_login(leader)
    response = _patch(client, budget_tree.olmo, {"grant_gpu_hours": "2600"})
    assert response.status_code == 400
    assert "cap of 2,500" in response.json()["message"]


def test_a_grant_cannot_fall_below_what_the_children_hold(client, leader, budget_tree):
    client.force_login(leader)
    response = _patch(client, budget_tree.nlp, {"grant_gpu_hours": "4999"})
    assert response.status_code == 400
    assert response.json()["field"] == "grant_gpu_hours"
    assert "children already hold 5,000" in response.json()["message"]
    assert _grant(budget_tree.nlp) == 6_000


def test_a_second_editor_with_a_stale_version_gets_a_conflict_not_an_overwrite(
    client, leader, manager, budget_tree
):
    client.force_login(leader)
    version = client.get(f"/api/v1/budgets/{budget_tree.olmo.pk}/").json()["version"]
    first = _patch(client, budget_tree.olmo, {"grant_gpu_hours": "2500", "version": version})
    client.force_login(manager)
    second = _patch(client, budget_tree.olmo, {"grant_gpu_hours": "3500", "version": version})
    assert first.status_code == 200
    assert first.json()["version"] == version + 1
    assert second.status_code == 409
    assert second.json()["field"] == "grant_gpu_hours"
    assert "changed by someone else" in second.json()["message"]
    assert _grant(budget_tree.olmo) == 2_500


def test_the_page_shows_a_conflict_in_place_with_the_fresh_version(client, leader, budget_tree):
    client.force_login(leader)
    services.set_grant(None, budget_tree.olmo, 2_800)  # someone else, after the page loaded
    response = client.post(
        f"/budgets/{budget_tree.olmo.pk}/grant/", {"grant_gpu_hours": "2900", "version": "1"}
    )
    assert response.status_code == 409
    assert "changed by someone else" in response.content.decode()
    assert _grant(budget_tree.olmo) == 2_800


def test_an_inline_error_is_rendered_beside_the_edited_grant(client, manager, budget_tree):
    client.force_login(manager)
    response = client.post(
        f"/budgets/{budget_tree.olmo.pk}/grant/",
        {"grant_gpu_hours": "9000"},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    row = html[html.index(f'id="node-{budget_tree.olmo.pk}"') :]
    row = row[: row.index("</tr>")]
    assert response.status_code == 200
    assert "<html" not in html
    assert f'id="error-{budget_tree.olmo.pk}"' in row
    assert "Exceeds the grant of nlp" in row
    assert 'value="9000"' in row
    assert _grant(budget_tree.olmo) == 3_000


def test_without_htmx_a_bad_grant_re_renders_the_page_with_a_400(client, leader, budget_tree):
    client.force_login(leader)
    response = client.post(f"/budgets/{budget_tree.olmo.pk}/grant/", {"grant_gpu_hours": "-1"})
    assert response.status_code == 400
    assert "cannot be negative" in response.content.decode()
    assert "<html" in response.content.decode()


@pytest.mark.parametrize(
    "source, target, amount, field, says",
    [
        ("olmo", "segmentation", "10", "target", "siblings"),
        ("olmo", "tulu", "3001", "gpu_hours", "holds only 3,000"),
        ("olmo", "tulu", "0", "gpu_hours", "more than zero"),
        ("olmo", "olmo", "10", "target", "different node"),
        ("nlp", "vision", "1001", "gpu_hours", "at most 1,000"),
    ],
)
def test_a_bad_transfer_names_the_field_and_moves_nothing(
    client, leader, budget_tree, source, target, amount, field, says
):
    client.force_login(leader)
    t = vars(budget_tree)
    response = client.post(
        "/api/v1/budgets/transfers/",
        {"source": t[source].pk, "target": t[target].pk, "gpu_hours": amount},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert says in response.json()["message"]
    assert [_grant(t[n]) for n in ("olmo", "tulu", "nlp", "vision")] == [3000, 2000, 6000, 3000]


def test_a_node_cannot_move_under_its_own_descendant(budget_tree, leader):
    deeper = services.create_node(leader, budget_tree.olmo, "Ablations")
    with pytest.raises(services.BudgetValidationError) as raised:
        services.move_node(leader, budget_tree.nlp, deeper)
    assert raised.value.field == "parent"
    assert BudgetNode.objects.get(pk=budget_tree.nlp.pk).depth == 2


def test_a_move_into_a_parent_without_room_is_refused(budget_tree, leader):
    with pytest.raises(services.BudgetValidationError) as raised:
        services.move_node(leader, budget_tree.olmo, budget_tree.vision)
    assert "cannot take" in raised.value.message
    assert BudgetNode.objects.get(pk=budget_tree.olmo.pk).slug_path == "nlp/olmo"


def test_a_sibling_with_the_same_short_name_is_refused(budget_tree, leader):
    with pytest.raises(services.BudgetValidationError) as raised:
        services.create_node(leader, budget_tree.nlp, "OLMo")
    assert raised.value.field == "slug"
