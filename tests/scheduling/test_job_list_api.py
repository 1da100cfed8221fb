"""GET /api/v1/jobs/ filters (state, cluster, owner, mine, project) and the queue order that
`allot queue` asks for; bad values are a 400 naming the parameter; all in the schema."""

import pytest

from scheduling.services import JobRequest, cancel_job, submit_job
from tests.scheduling.conftest import make_cluster

pytestmark = pytest.mark.django_db


def submit(user, name, cluster="jupiter", project="nlp/olmo", gpus=8):
    return submit_job(
        user,
        JobRequest(
            name=name,
            project=project,
            cluster=cluster,
            gpus=gpus,
            min_runtime_s=3600,
            sim_duration_s=36_000,
        ),
    )


@pytest.fixture
def jobs(researcher, manager, cluster, tmp_path, run_pass):
    make_cluster(tmp_path / "saturn", name="saturn")
    big = submit(researcher, "big", gpus=16)
    run_pass(cluster)  # big runs and fills jupiter
    first = submit(researcher, "first")
    second = submit(manager, "second", project="nlp/tulu")
    elsewhere = submit(researcher, "elsewhere", cluster="saturn")
    gone = submit(researcher, "gone")
    cancel_job(researcher, gone.pk)
    run_pass(cluster)
    return {job.name: job.pk for job in (big, first, second, elsewhere, gone)}


def names(client, jobs, query=""):
    response = client.get(f"/api/v1/jobs/{query}")
    assert response.status_code == 200, response.json()
    by_id = {pk: name for name, pk in jobs.items()}
    return [by_id[row["id"]] for row in response.json()["results"]]


def test_states_clusters_owners_and_projects_filter_the_list(client, manager, jobs):
    client.force_login(manager)
    assert names(client, jobs, "?state=cancelled") == ["gone"]
    assert sorted(names(client, jobs, "?state=running,pending")) == [
        "big",
        "elsewhere",
        "first",
        "second",
    ]
    assert sorted(names(client, jobs, "?cluster=saturn")) == ["elsewhere"]
    assert sorted(names(client, jobs, "?owner=manager")) == ["second"]
    assert sorted(names(client, jobs, "?mine=true")) == ["second"]
    assert len(names(client, jobs, "?mine=false")) == 5
    assert sorted(names(client, jobs, "?project=nlp")) == sorted(jobs)
    assert sorted(names(client, jobs, "?project=nlp/tulu")) == ["second"]
    assert names(client, jobs, "?project=nl") == []  # a path, not a prefix of a name


def test_queue_order_puts_running_first_then_pending_by_position(client, manager, jobs):
    client.force_login(manager)
    order = names(client, jobs, "?cluster=jupiter&state=pending,running&order=queue")
    assert order == ["big", "first", "second"]
    rows = client.get("/api/v1/jobs/?cluster=jupiter&order=queue&state=pending").json()
    assert [row["queue_position"] for row in rows["results"]] == [1, 2]


def test_the_filters_keep_to_what_the_caller_may_see(client, researcher, jobs):
    client.force_login(researcher)  # a member of nlp/olmo: nlp/tulu's jobs are not theirs to see
    assert names(client, jobs, "?owner=manager") == []
    assert names(client, jobs, "?project=nlp/tulu") == []
    assert sorted(names(client, jobs, "?project=nlp&state=pending")) == ["elsewhere", "first"]


@pytest.mark.parametrize(
    "query, field",
    [("?state=runing", "state"), ("?order=fastest", "order"), ("?mine=perhaps", "mine")],
)
def test_a_bad_filter_is_a_400_naming_it(client, researcher, query, field):
    client.force_login(researcher)
    response = client.get(f"/api/v1/jobs/{query}")
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_the_schema_documents_the_filters(client, researcher):
    client.force_login(researcher)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    parameters = {p["name"] for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]}
    assert {"state", "cluster", "owner", "mine", "project", "order"} <= parameters
    budget = schema["components"]["schemas"]["BudgetNode"]["properties"]
    assert "burn_gpu_hours_per_day" in budget
