"""The node page's structure forms: rename, weight, add a child, move, archive.

Plain form posts redirect back (or re-render with the error, status 400); htmx posts get the
`node-body` fragment with the change, or the error beside its field, and the history updated.
"""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from budgets import services
from budgets.models import AuditAction, AuditEntry, BudgetNode
from tests.budgets.factories import UsageEntryFactory
from tests.budgets.helpers import queries_to_get, role_cases, snapshot

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
# session, user, the node, roles with the cluster-admins group; tree stats (nodes+grants,
# usage, liens); the burn-down (its own balances: usage, liens, nodes+grants; then usage per
# day); the nav's unread-exceptions badge; the history.
NODE_PAGE_QUERIES = 13


def _url(node, action=""):
    return f"/budgets/{node.pk}/{action + '/' if action else ''}"


def _reload(node):
    return BudgetNode.objects.get(pk=node.pk)


# --- each action, as a plain form post and with htmx ----------------------------------------


def test_renaming_from_the_page_redirects_back_and_records_it(client, manager, budget_tree):
    client.force_login(manager)
    response = client.post(
        _url(budget_tree.tulu, "rename"), {"name": "Tülu 3", "slug": "tulu3", "reason": "v3"}
    )
    assert response.status_code == 302
    assert response["Location"] == _url(budget_tree.tulu)
    assert (_reload(budget_tree.tulu).name, _reload(budget_tree.tulu).slug_path) == (
        "Tülu 3",
        "nlp/tulu3",
    )
    page = client.get(response["Location"]).content.decode()
    assert "Renamed to Tülu 3 (nlp/tulu3)." in page
    history = page[page.index('id="history"') :]
    assert "— → Tülu 3" not in history  # the rename row, not the creation, is on top
    assert "Tülu → Tülu 3" in history
    assert "tulu → tulu3" in history


def test_renaming_with_htmx_returns_the_node_fragment_with_its_history(client, leader, budget_tree):
    client.force_login(leader)
    response = client.post(
        _url(budget_tree.nlp, "rename"),
        {"name": "LLMs", "slug": "nlp", "reason": "shorter"},
        **HTMX,
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="node-body">')
    assert "<h1>LLMs" in html
    history = html[html.index('id="history"') :]
    assert "Language models → LLMs" in history
    assert "shorter" in history


def test_setting_and_clearing_a_weight_from_the_page(client, manager, budget_tree):
    client.force_login(manager)
    html = client.post(_url(budget_tree.tulu, "weight"), {"weight": "3000"}, **HTMX).content
    assert "weight 3,000" in html.decode()
    assert "50.0 %" in html.decode()  # tulu's share of nlp, now equal to olmo's
    assert _reload(budget_tree.tulu).weight == 3000
    response = client.post(_url(budget_tree.tulu, "weight"), {"weight": ""})
    assert response.status_code == 302
    assert _reload(budget_tree.tulu).weight is None
    rows = AuditEntry.objects.filter(node=budget_tree.tulu, action=AuditAction.SET_WEIGHT)
    assert list(rows.order_by("id").values_list("actor__username", "new")) == [
        ("manager", "3000.00"),
        ("manager", ""),
    ]


def test_adding_a_child_with_a_grant_shows_it_among_the_children(client, manager, budget_tree):
    client.force_login(manager)
    response = client.post(
        _url(budget_tree.nlp, "children"),
        {"name": "Safety", "slug": "", "grant_gpu_hours": "500", "reason": "new team"},
        **HTMX,
    )
    html = response.content.decode()
    child = BudgetNode.objects.get(slug_path="nlp/safety")
    assert f'id="child-{child.pk}"' in html
    assert "Created nlp/safety." in html
    history = html[html.index('id="history"') :]
    assert "— → Safety" in history  # the creation, shown on the parent's page
    assert "0.00 → 500.00" in history
    assert set(AuditEntry.objects.filter(node=child).values_list("action", "actor__username")) == {
        (AuditAction.CREATE, "manager"),
        (AuditAction.SET_GRANT, "manager"),
    }


def test_moving_from_the_page_changes_the_path(client, manager, budget_tree, ablations):
    client.force_login(manager)
    response = client.post(
        _url(ablations, "move"), {"parent": budget_tree.tulu.pk, "reason": "tulu owns it"}
    )
    assert response.status_code == 302
    assert _reload(ablations).slug_path == "nlp/tulu/ablations"
    page = client.get(_url(ablations)).content.decode()
    assert "nlp/olmo → nlp/tulu" in page
    assert "tulu owns it" in page


def test_archiving_from_the_page_goes_to_the_parent(client, leader, budget_tree, ablations):
    client.force_login(leader)
    response = client.post(_url(ablations, "archive"), {"reason": "finished"})
    assert response.status_code == 302
    assert response["Location"] == _url(budget_tree.olmo)
    assert _reload(ablations).archived
    page = client.get(response["Location"]).content.decode()
    assert "Archived nlp/olmo/ablations." in page
    assert "finished" in page[page.index('id="history"') :]


def test_archiving_with_htmx_redirects_the_browser(client, leader, budget_tree, ablations):
    client.force_login(leader)
    response = client.post(_url(ablations, "archive"), {}, **HTMX)
    assert response["HX-Redirect"] == _url(budget_tree.olmo)
    assert _reload(ablations).archived


# --- errors, in place, with nothing changed --------------------------------------------------

# (node, action, posted, field). tulu's siblings: olmo. nlp has 1,000 GPU-hours free.
BAD_POSTS = [
    ("tulu", "rename", {"name": ""}, "name"),
    ("tulu", "rename", {"name": "z" * 121}, "name"),
    ("tulu", "rename", {"name": "Tülu", "slug": "olmo"}, "slug"),
    ("tulu", "rename", {"name": "Tülu", "slug": "%%"}, "slug"),
    ("tulu", "weight", {"weight": "-3"}, "weight"),
    ("tulu", "weight", {"weight": "heavy"}, "weight"),
    ("nlp", "children", {"name": ""}, "name"),
    ("nlp", "children", {"name": "OLMo"}, "slug"),
    ("nlp", "children", {"name": "New", "slug": "tulu"}, "slug"),
    ("nlp", "children", {"name": "New", "grant_gpu_hours": "1500"}, "grant_gpu_hours"),
    ("nlp", "children", {"name": "New", "grant_gpu_hours": "-1"}, "grant_gpu_hours"),
    ("nlp", "children", {"name": "New", "grant_gpu_hours": "much"}, "grant_gpu_hours"),
    ("nlp", "children", {"name": "New", "grant_gpu_hours": "1e12"}, "grant_gpu_hours"),
    ("nlp", "move", {"parent": "olmo"}, "parent"),  # its own descendant
    ("olmo", "move", {"parent": "vision"}, "parent"),  # vision has too little room
    ("olmo", "move", {"parent": ""}, "parent"),
    ("tulu", "archive", {}, "grant_gpu_hours"),  # still holds a grant
    ("root", "archive", {}, "node"),
    ("root", "move", {"parent": "nlp"}, "parent"),
]


def _resolve(tree, posted):
    """Node names in "parent" become ids."""
    parent = posted.get("parent")
    if parent and hasattr(tree, parent):
        return {**posted, "parent": getattr(tree, parent).pk}
    return posted


def _error_for(html, form, field):
    """The error shown beside the input, or under the form for fields it has no input for."""
    beside = f'id="{form}-{field}-error"'
    if beside in html:
        return html[html.index(beside) :].split("</p>")[0]
    under = f'data-field="{field}"'
    assert under in html, f"no error for {field} in the {form} form"
    return html[html.rindex("<p", 0, html.index(under)) :].split("</p>")[0]


FORM_OF = {"rename": "rename", "weight": "weight", "children": "child", "move": "move"}


@pytest.mark.parametrize(("node", "action", "posted", "field"), BAD_POSTS)
@pytest.mark.parametrize("htmx", [False, True], ids=["plain", "htmx"])
def test_a_refused_form_shows_the_error_beside_its_field_and_changes_nothing(
    client, leader, budget_tree, node, action, posted, field, htmx
):
    client.force_login(leader)
    before = snapshot()
    response = client.post(
        _url(getattr(budget_tree, node), action),
        _resolve(budget_tree, posted),
        **(HTMX if htmx else {}),
    )
    html = response.content.decode()
    assert response.status_code == (200 if htmx else 400)
    assert html.lstrip().startswith('<div id="node-body">') == htmx
    assert 'role="alert"' in _error_for(html, FORM_OF.get(action, action), field)
    assert snapshot() == before


def test_what_was_typed_stays_in_the_form_after_a_refusal(client, leader, budget_tree):
    client.force_login(leader)
    html = client.post(
        _url(budget_tree.nlp, "children"),
        {"name": "Overbudget", "grant_gpu_hours": "1500", "reason": "big plans"},
    ).content.decode()
    assert 'id="child-name" name="name" value="Overbudget"' in html
    assert 'value="1500"' in html
    assert 'aria-invalid="true" aria-describedby="child-grant_gpu_hours-error"' in html
    assert "at most 1,000.00 is available" in html


def test_a_node_funding_running_jobs_is_not_archived(client, leader, budget_tree, ablations):
    services.hold_lien(ablations, job_ref=7, cost_gpu_seconds=3600, require_funds=False)
    client.force_login(leader)
    html = client.post(_url(ablations, "archive"), {}, **HTMX).content.decode()
    assert "funds running jobs" in _error_for(html, "archive", "node")
    assert not _reload(ablations).archived


def test_a_manager_cannot_move_into_another_program_from_the_page(client, manager, budget_tree):
    client.force_login(manager)
    before = snapshot()
    response = client.post(_url(budget_tree.tulu, "move"), {"parent": budget_tree.vision.pk})
    assert response.status_code == 404
    assert "No such budget node." in _error_for(response.content.decode(), "move", "parent")
    assert snapshot() == before


# --- who may do what ------------------------------------------------------------------------

PAGE_ACTIONS = {
    "rename": ("ablations", {"name": "Renamed"}),
    "weight": ("ablations", {"weight": "2"}),
    "children": ("olmo", {"name": "Evals", "grant_gpu_hours": "10"}),
    "move": ("ablations", {"parent": "tulu"}),
    "archive": ("ablations", {}),
}
# A refusal of the node itself is the error page (403, or 404 outside one's scope); for the
# move, a destination the project lead cannot see is refused in place with 404.
PAGE_MATRIX = {
    "leader": [302, 302, 302, 302, 302],
    "manager": [302, 302, 302, 302, 302],
    "project_lead": [302, 302, 302, 404, 302],
    "researcher": [403, 403, 403, 403, 403],
    "cluster_admin": [403, 403, 403, 403, 403],
    "other_manager": [404, 404, 404, 404, 404],
    "outsider": [404, 404, 404, 404, 404],
}
PAGE_CASES = role_cases(PAGE_MATRIX, PAGE_ACTIONS)


@pytest.mark.parametrize(("who", "action", "expected"), PAGE_CASES)
def test_each_page_action_is_allowed_or_refused_by_role(
    client, personas, budget_tree, ablations, who, action, expected
):
    user = personas[who]
    node_name, posted = PAGE_ACTIONS[action]
    node = ablations if node_name == "ablations" else getattr(budget_tree, node_name)
    data = _resolve(budget_tree, posted)
    client.force_login(user)
    before = snapshot()
    response = client.post(_url(node, action), data)
    assert response.status_code == expected
    if expected == 302:
        assert AuditEntry.objects.filter(actor=user).exists()
    else:
        assert snapshot() == before


def _manage_forms(html):
    return {f for f in ("rename", "weight", "child", "move", "archive") if f'id="{f}-form"' in html}


@pytest.mark.parametrize(
    ("who", "node", "forms"),
    [
        ("leader", "root", {"rename", "weight", "child"}),  # the root neither moves nor archives
        ("leader", "tulu", {"rename", "weight", "child", "move", "archive"}),
        ("manager", "nlp", {"child"}),  # the program itself is leadership's to change
        ("manager", "tulu", {"rename", "weight", "child", "move", "archive"}),
        ("project_lead", "olmo", {"child"}),
        ("researcher", "olmo", set()),
        ("cluster_admin", "tulu", set()),
    ],
)
def test_the_page_offers_only_the_forms_the_user_may_use(
    client, personas, budget_tree, who, node, forms
):
    client.force_login(personas[who])
    html = client.get(_url(getattr(budget_tree, node))).content.decode()
    assert _manage_forms(html) == forms


def test_the_move_choices_are_the_nodes_the_user_may_build_under(client, manager, budget_tree):
    client.force_login(manager)
    html = client.get(_url(budget_tree.tulu)).content.decode()
    select = html[html.index('id="move-parent"') : html.index("</select>")]
    # Not nlp (its parent already), not tulu itself, not vision or the root (out of scope).
    assert select.count("<option") == 1
    assert f'value="{budget_tree.olmo.pk}"' in select


def test_the_page_links_to_a_top_up_request(client, researcher, budget_tree):
    client.force_login(researcher)
    html = client.get(_url(budget_tree.olmo)).content.decode()
    assert f'href="/exceptions/new/topup/{budget_tree.olmo.pk}/"' in html
    assert "Request a top-up" in html


# --- query counts ---------------------------------------------------------------------------


def _add_children(parent, count):
    services.set_grant(None, parent, 6_000 + count)
    for i in range(count):
        child = services.create_node(None, parent, f"Child {i}")
        services.set_grant(None, child, 1)
        UsageEntryFactory(node=child, cost_gpu_seconds=360)


def test_the_node_page_query_count_is_pinned(
    client, leader, budget_tree, django_assert_num_queries
):
    client.force_login(leader)
    with django_assert_num_queries(NODE_PAGE_QUERIES):
        client.get(_url(budget_tree.nlp))


def test_the_node_page_queries_do_not_grow_with_its_children(client, leader, budget_tree):
    client.force_login(leader)
    services.set_grant(None, budget_tree.root, 100_000)
    small = queries_to_get(client, _url(budget_tree.nlp))
    _add_children(budget_tree.nlp, 25)
    html = client.get(_url(budget_tree.nlp)).content.decode()
    assert len(re.findall(r'id="child-\d+"', html)) == 27
    assert queries_to_get(client, _url(budget_tree.nlp)) == small == NODE_PAGE_QUERIES


def test_a_refused_form_costs_no_more_queries_with_more_children(client, leader, budget_tree):
    client.force_login(leader)
    services.set_grant(None, budget_tree.root, 100_000)
    url = _url(budget_tree.nlp, "children")

    def refused():
        with CaptureQueriesContext(connection) as captured:
            client.post(url, {"name": "OLMo"}, **HTMX)  # slug clash: refused
        return len(captured)

    small = refused()
    _add_children(budget_tree.nlp, 25)
    assert refused() == small
