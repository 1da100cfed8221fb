"""The pages: "Preview changes" on /budgets/, simulate, the side-by-side result, apply and
its refusal (nothing half-written)."""

import re

import pytest

from budgets import services as budget_services
from budgets.balances import tree_stats
from budgets.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def simulate(client, django_capture_on_commit_callbacks, eager_celery):
    def post(fields, **extra):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/budgets/preview/simulate/", fields, **extra)

    return post


def _grants():
    return {s.node.slug_path: s.grant_gpu_hours for s in tree_stats().values()}


def test_the_budgets_page_offers_a_preview_to_leadership_only(client, leader, researcher, recorded):
    client.force_login(leader)
    assert 'id="preview-changes"' in client.get("/budgets/").content.decode()
    page = client.get("/budgets/preview/").content.decode()
    assert 'name="grant:nlp/tulu"' in page and 'name="grant:nlp"' in page
    client.force_login(researcher)
    assert 'id="preview-changes"' not in client.get("/budgets/").content.decode()
    assert client.get("/budgets/preview/").status_code == 403


def test_a_manager_edits_only_below_their_program(client, manager, recorded):
    client.force_login(manager)
    page = client.get("/budgets/preview/").content.decode()
    assert 'name="grant:nlp/tulu"' in page
    assert 'name="grant:nlp"' not in page
    assert "vision" not in page


def test_simulate_shows_progress_then_the_side_by_side_result(
    client, leader, recorded, at_as_of, simulate
):
    client.force_login(leader)
    response = simulate({"weeks": "1", "grant:nlp/olmo": "1000", "grant:nlp/tulu": "3000"})
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert 'data-status="done"' in page
    assert re.search(r'<tr data-path="nlp/tulu">', page)
    assert "<svg" in page and "Wait p95, 2-4 GPUs" in page
    assert 'id="whatif-apply"' in page


def test_a_bad_proposal_comes_back_with_the_error_and_the_typed_values(
    client, leader, recorded, simulate
):
    client.force_login(leader)
    response = simulate({"weeks": "1", "grant:nlp/tulu": "-3"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-field="grants.nlp/tulu"' in page
    assert 'value="-3"' in page


def test_apply_sets_the_grants_through_the_services_with_audit_rows(
    client, leader, recorded, at_as_of, simulate
):
    client.force_login(leader)
    detail = simulate({"weeks": "1", "grant:nlp/olmo": "1000", "grant:nlp/tulu": "3000"})
    pk = detail["Location"].rstrip("/").rsplit("/", 1)[-1]
    response = client.post(f"/budgets/preview/{pk}/apply/")
    assert response.status_code == 302
    grants = _grants()
    assert (grants["nlp/olmo"], grants["nlp/tulu"]) == (1000, 3000)
    audit = AuditEntry.objects.filter(reason=f"applied from what-if preview #{pk}")
    assert sorted(a.node.slug_path for a in audit) == ["nlp/olmo", "nlp/tulu"]


def test_a_refused_apply_writes_nothing(client, leader, recorded, at_as_of, simulate):
    client.force_login(leader)
    detail = simulate({"weeks": "1", "grant:nlp/olmo": "1000", "grant:nlp/tulu": "5000"})
    pk = detail["Location"].rstrip("/").rsplit("/", 1)[-1]
    # meanwhile someone gives olmo's spare room to a new sibling: tulu 5,000 no longer fits
    extra = budget_services.create_node(None, recorded.tree.nlp, "Extra", "extra")
    budget_services.set_grant(None, extra, 1000)
    before, audit = _grants(), AuditEntry.objects.count()
    response = client.post(f"/budgets/preview/{pk}/apply/")
    assert response.status_code == 400
    assert "Not applied" in response.content.decode()
    assert _grants() == before
    assert AuditEntry.objects.count() == audit
