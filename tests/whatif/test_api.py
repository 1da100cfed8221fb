"""POST /api/v1/whatif/ and GET /api/v1/whatif/{id}/: the task, the result, the cache, scope."""

import pytest

from budgets import services as budget_services
from budgets.balances import tree_stats
from budgets.models import AuditEntry
from whatif import replay
from whatif.models import Preview

pytestmark = pytest.mark.django_db


def _post(client, body):
    return client.post("/api/v1/whatif/", body, content_type="application/json")


@pytest.fixture
def run_tasks(django_capture_on_commit_callbacks, eager_celery):
    """Requests whose transaction commits run their queued task in process, as a worker."""

    def post(client, body):
        with django_capture_on_commit_callbacks(execute=True):
            return _post(client, body)

    return post


def test_a_preview_replays_current_and_proposed_and_changes_no_grant(
    client, leader, recorded, at_as_of, run_tasks
):
    client.force_login(leader)
    grants_before = {s.node.slug_path: s.grant_gpu_hours for s in tree_stats().values()}
    audit_before = AuditEntry.objects.count()
    proposal = {"nlp/olmo": 1000, "nlp/tulu": 3000}
    response = run_tasks(client, {"weeks": 1, "grants": proposal})
    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    body = client.get(f"/api/v1/whatif/{response.json()['id']}/").json()
    assert (body["status"], body["progress"], body["jobs"]) == ("done", 1.0, 60)
    current, proposed = body["result"]["current"], body["result"]["proposed"]
    assert current["policy"] == proposed["policy"] == "fairshare"
    assert current["horizon_s"] == proposed["horizon_s"] == pytest.approx(6 * 3600 - 1)
    assert current["projects"]["nlp/tulu"]["budget_share"] == pytest.approx(0.4 * 6 / 9, abs=1e-6)
    assert proposed["projects"]["nlp/tulu"]["budget_share"] == pytest.approx(0.75 * 6 / 9, abs=1e-6)
    delivered = [r["projects"]["nlp/tulu"]["delivered_share"] for r in (current, proposed)]
    assert delivered[1] > delivered[0]
    assert {s.node.slug_path: s.grant_gpu_hours for s in tree_stats().values()} == grants_before
    assert AuditEntry.objects.count() == audit_before


def test_asking_twice_is_answered_from_the_cache(
    client, leader, recorded, at_as_of, run_tasks, monkeypatch
):
    client.force_login(leader)
    first = run_tasks(client, {"weeks": 1, "grants": {"nlp/tulu": "3000"}}).json()

    def no_replay(*args, **kwargs):
        raise AssertionError("a cached preview must not replay")

    monkeypatch.setattr(replay, "replay", no_replay)
    again = _post(client, {"weeks": 1, "grants": {"nlp/tulu": 3000.0}})
    assert again.status_code == 202
    assert again.json()["status"] == "done"
    assert again.json()["id"] != first["id"]
    one, two = (
        client.get(f"/api/v1/whatif/{i}/").json() for i in (first["id"], again.json()["id"])
    )
    assert one["result"] == two["result"]


def test_a_new_proposal_reuses_the_current_replay(
    client, leader, recorded, at_as_of, run_tasks, monkeypatch
):
    client.force_login(leader)
    run_tasks(client, {"weeks": 1, "grants": {"nlp/tulu": 3000}})
    calls = []
    real = replay.replay

    def counted(*args, **kwargs):
        calls.append(args[0]["budgets"])
        return real(*args, **kwargs)

    monkeypatch.setattr(replay, "replay", counted)
    body = run_tasks(client, {"weeks": 1, "grants": {"nlp/olmo": 4000}}).json()
    assert client.get(f"/api/v1/whatif/{body['id']}/").json()["status"] == "done"
    assert len(calls) == 1  # only the proposed replay ran


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"weeks": 1, "grants": {"nlp/nope": 10}}, "grants.nlp/nope"),
        ({"weeks": 1, "grants": {"nlp/tulu": -5}}, "grants.nlp/tulu"),
        ({"weeks": 1, "grants": {"nlp/tulu": "lots"}}, "grants.nlp/tulu"),
        ({"weeks": 1, "grants": {"nlp/tulu": 5000}}, "grants.nlp/tulu"),  # nlp holds 6,000
        ({"weeks": 1, "grants": {"nlp": 2000}}, "grants.nlp"),  # below its children
        ({"weeks": 0, "grants": {}}, "weeks"),
        ({"weeks": 1, "grants": ["nlp/tulu"]}, "grants"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(client, leader, recorded, body, field):
    client.force_login(leader)
    response = _post(client, body)
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_a_manager_cannot_preview_another_program(client, manager, recorded):
    client.force_login(manager)
    hidden = _post(client, {"weeks": 1, "grants": {"vision/segmentation": 2000}})
    assert hidden.status_code == 400
    assert hidden.json()["field"] == "grants.vision/segmentation"
    own_program = _post(client, {"weeks": 1, "grants": {"nlp": 7000}})  # leadership's call
    assert own_program.status_code == 403
    assert own_program.json()["field"] == "grants.nlp"


def test_a_researcher_cannot_preview(client, researcher, recorded):
    client.force_login(researcher)
    assert _post(client, {"weeks": 1, "grants": {}}).status_code == 403


def test_a_manager_sees_only_their_programs_projects_and_not_others_previews(
    client, manager, leader, recorded, at_as_of, run_tasks
):
    client.force_login(leader)
    leaders = run_tasks(client, {"weeks": 1, "grants": {}}).json()["id"]
    client.force_login(manager)
    assert client.get(f"/api/v1/whatif/{leaders}/").status_code == 404
    mine = run_tasks(client, {"weeks": 1, "grants": {"nlp/tulu": 2500}}).json()["id"]
    result = client.get(f"/api/v1/whatif/{mine}/").json()["result"]
    assert set(result["proposed"]["projects"]) == {"nlp/olmo", "nlp/tulu"}


def test_the_schema_documents_the_endpoints(client, leader):
    client.force_login(leader)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/whatif/" in schema
    assert "/api/v1/whatif/{id}/" in schema


def test_a_large_workload_replays_the_proposal_in_a_second_process_with_the_same_result(
    client, leader, recorded, at_as_of, run_tasks, settings
):
    client.force_login(leader)
    body = {"weeks": 1, "grants": {"nlp/olmo": 1000, "nlp/tulu": 3000}}
    in_process = client.get(f"/api/v1/whatif/{run_tasks(client, body).json()['id']}/").json()
    Preview.objects.all().delete()  # nothing cached
    settings.ALLOT_WHATIF_PARALLEL_JOBS = 1
    both = client.get(f"/api/v1/whatif/{run_tasks(client, body).json()['id']}/").json()
    assert both["status"] == "done"
    for side in ("current", "proposed"):
        for result in (in_process, both):
            result["result"][side].pop("wall_s")
        assert both["result"][side] == in_process["result"][side]


def test_once_the_grants_change_the_next_preview_reads_them(
    client, leader, recorded, at_as_of, run_tasks
):
    client.force_login(leader)
    first = run_tasks(client, {"weeks": 1, "grants": {}}).json()["id"]
    budget_services.set_grant(leader, recorded.tree.tulu, 3000)
    second = run_tasks(client, {"weeks": 1, "grants": {}}).json()["id"]
    shares = [
        client.get(f"/api/v1/whatif/{i}/").json()["result"]["current"]["projects"]["nlp/tulu"]
        for i in (first, second)
    ]
    assert shares[1]["budget_share"] > shares[0]["budget_share"]
