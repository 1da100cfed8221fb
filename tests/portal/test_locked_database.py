"""The backstop for the SQLite demo: a request that waited out SQLite's busy timeout answers
503 with Retry-After (retry and it goes through), never a 500; other database errors stay 500."""

import pytest
from django.db import OperationalError

from scheduling import services
from tests.scheduling.conftest import make_cluster
from tests.scheduling.test_live_pass import submit


def _fails_with(message):
    def fail(*args, **kwargs):
        raise OperationalError(message)

    return fail


@pytest.fixture
def job(researcher, db, tmp_path):
    make_cluster(tmp_path)
    return submit(researcher)


JOB = {"name": "t", "project": "nlp/olmo", "cluster": "jupiter", "gpus": 1,
       "min_runtime_s": 600, "sim_duration_s": 600}  # fmt: skip


def test_a_submission_meeting_a_locked_database_answers_503_with_retry_after(
    client, researcher, job, monkeypatch
):
    monkeypatch.setattr(services, "submit_job", _fails_with("database is locked"))
    client.force_login(researcher)
    response = client.post("/api/v1/jobs/", JOB, content_type="application/json")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {"message": "The database is busy; retry in a few seconds.",
                               "field": None}  # fmt: skip


def test_a_page_meeting_a_locked_database_answers_503_too(client, researcher, job, monkeypatch):
    monkeypatch.setattr(services, "cancel_job", _fails_with("database is locked"))
    client.force_login(researcher)
    response = client.post(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "retry" in response.content.decode()


def test_any_other_database_error_is_still_a_500(client, researcher, job, monkeypatch):
    monkeypatch.setattr(services, "submit_job", _fails_with("disk I/O error"))
    client.raise_request_exception = False
    client.force_login(researcher)
    response = client.post("/api/v1/jobs/", JOB, content_type="application/json")
    assert response.status_code == 500


@pytest.fixture
def session_save_locked(monkeypatch):
    """The session's save after the view (SessionMiddleware, on the way out) meets a locked
    database; the save that creates a new session key inside the login view still works."""
    from django.contrib.sessions.backends.db import SessionStore

    real = SessionStore.save

    def save(self, must_create=False):
        if not must_create:
            raise OperationalError("database is locked")
        return real(self, must_create=must_create)

    monkeypatch.setattr(SessionStore, "save", save)


def test_a_session_write_after_the_view_meeting_a_locked_database_answers_503(
    client, researcher, db, session_save_locked
):
    client.raise_request_exception = False  # the client would re-raise what Django announces
    response = client.post("/login/", {"username": researcher.username, "password": "demo"})
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "retry" in response.content.decode()
    assert client.get("/").status_code == 302  # the login did not stick: retry it


def test_a_middleware_error_other_than_a_locked_database_is_still_a_500(
    client, researcher, db, monkeypatch
):
    from django.contrib.sessions.backends.db import SessionStore

    real = SessionStore.save

    def save(self, must_create=False):
        if not must_create:
            raise OperationalError("disk I/O error")
        return real(self, must_create=must_create)

    monkeypatch.setattr(SessionStore, "save", save)
    client.raise_request_exception = False
    response = client.post("/login/", {"username": researcher.username, "password": "demo"})
    assert response.status_code == 500
