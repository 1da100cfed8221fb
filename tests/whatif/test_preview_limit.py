"""Previews are capped per user and run on their own Celery queue, so a manager's burst of
twelve-week replays neither floods the workers nor delays a scheduling pass."""

import pytest
from django.test import override_settings

from portal.celery import app
from whatif.models import Preview

pytestmark = pytest.mark.django_db


def _post(client, grants):
    return client.post(
        "/api/v1/whatif/", {"weeks": 1, "grants": grants}, content_type="application/json"
    )


@override_settings(ALLOT_WHATIF_MAX_PER_USER=2)
def test_a_user_with_the_limit_of_previews_waiting_is_refused_with_429_naming_it(
    client, leader, recorded, at_as_of
):
    client.force_login(leader)
    first = _post(client, {"nlp/tulu": 500})
    second = _post(client, {"nlp/tulu": 600})
    assert (first.status_code, second.status_code) == (202, 202)

    third = _post(client, {"nlp/tulu": 700})

    assert third.status_code == 429
    assert "2" in third.json()["message"]
    assert "ALLOT_WHATIF_MAX_PER_USER" in third.json()["message"]
    assert Preview.objects.filter(requested_by=leader).count() == 2


@override_settings(ALLOT_WHATIF_MAX_PER_USER=1)
def test_a_finished_preview_frees_its_place_and_others_users_are_not_counted(
    client, leader, manager, recorded, at_as_of
):
    client.force_login(leader)
    first = _post(client, {"nlp/tulu": 500}).json()
    client.force_login(manager)
    assert _post(client, {"nlp/tulu": 500}).status_code == 202  # the leader's is not theirs

    Preview.objects.filter(pk=first["id"]).update(status=Preview.Status.FAILED)
    client.force_login(leader)
    assert _post(client, {"nlp/tulu": 600}).status_code == 202


@override_settings(ALLOT_WHATIF_MAX_PER_USER=1)
def test_the_simulate_page_shows_the_limit_in_place(client, leader, recorded, at_as_of):
    client.force_login(leader)
    client.post("/budgets/preview/simulate/", {"weeks": "1", "grant:nlp/tulu": "500"})

    refused = client.post("/budgets/preview/simulate/", {"weeks": "1", "grant:nlp/tulu": "600"})

    assert refused.status_code == 429
    assert "ALLOT_WHATIF_MAX_PER_USER" in refused.content.decode()


def test_the_preview_task_is_routed_to_its_own_queue_not_the_pass_queue():
    def queue_of(name):
        route = app.amqp.router.route({}, name)
        return route["queue"].name

    whatif = queue_of("whatif.tasks.run_preview")
    assert whatif != queue_of("scheduling.tasks.schedule_all")
    assert whatif != queue_of("scheduling.tasks.schedule_cluster")
    assert whatif != queue_of("scheduling.tasks.dispatch_starts")
