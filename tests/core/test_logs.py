"""Structured logs: LOG_FORMAT=json gives one JSON object a line with the event's fields; the
live loop logs one event per pass, dispatch, reconcile and charge with its ids."""

import io
import json
import logging

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.logs import TaskContext, event, formatter, logging_config


@pytest.fixture
def captured():
    """A handler with Allot's formatter on a private logger; returns (logger, lines())."""

    def make(log_format):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter(log_format))
        handler.addFilter(TaskContext())
        logger = logging.getLogger(f"tests.logs.{log_format}")
        logger.handlers, logger.propagate, logger.level = [handler], False, logging.DEBUG
        return logger, lambda: stream.getvalue().splitlines()

    return make


def test_json_lines_carry_the_event_and_its_fields(captured):
    logger, lines = captured("json")
    event(logger, "dispatch", cluster="jupiter", job=42, attempt="42-1-abc")
    logger.warning("plain %s", "words")
    first, second = (json.loads(line) for line in lines())
    assert first["event"] == "dispatch" and first["message"] == "dispatch"
    assert (first["cluster"], first["job"], first["attempt"]) == ("jupiter", 42, "42-1-abc")
    assert (first["level"], first["logger"]) == ("INFO", "tests.logs.json")
    assert first["time"].endswith("+00:00")
    assert second["message"] == "plain words" and "event" not in second


def test_text_lines_show_the_fields_as_key_value(captured):
    logger, lines = captured("text")
    event(logger, "pass", cluster="jupiter", started=3)
    assert lines()[0].endswith("INFO tests.logs.text pass cluster=jupiter started=3")


def test_an_unknown_log_format_stops_allot():
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT"):
        logging_config("xml", "INFO")


def test_the_config_uses_the_chosen_format():
    config = logging_config("json", "DEBUG")
    assert config["formatters"]["allot"]["log_format"] == "json"
    assert config["root"] == {"handlers": ["console"], "level": "DEBUG"}


def records(caplog, name):
    return [r for r in caplog.records if getattr(r, "event", None) == name]


@pytest.mark.django_db
def test_a_pass_a_dispatch_a_reconcile_and_a_charge_each_log_an_event(
    caplog, researcher, tmp_path, eager_celery, django_capture_on_commit_callbacks
):
    from scheduling import accounting, reconcile
    from scheduling.models import Job
    from scheduling.passes import run_pass
    from scheduling.services import JobRequest, submit_job
    from tests.scheduling.conftest import make_cluster

    cluster = make_cluster(tmp_path)
    job = submit_job(
        researcher,
        JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=8,
                   min_runtime_s=3600, sim_duration_s=3600),
    )  # fmt: skip
    caplog.set_level(logging.INFO)
    with django_capture_on_commit_callbacks(execute=True):
        run_pass(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and job.dispatched
    reconcile.sync_cluster(cluster.pk)
    accounting.charge_running_jobs()

    [a_pass] = records(caplog, "pass")
    assert (a_pass.cluster, a_pass.started) == ("jupiter", 1)
    [dispatch] = records(caplog, "dispatch")
    assert (dispatch.cluster, dispatch.job, dispatch.attempt) == (
        "jupiter",
        job.pk,
        job.attempt_key,
    )
    [sync] = records(caplog, "reconcile")
    assert sync.cluster == "jupiter" and sync.lost == []
    [charge] = records(caplog, "charge")
    assert charge.jobs == 1


def test_under_json_django_s_own_loggers_write_json_once(tmp_path):
    import os
    import subprocess
    import sys

    script = (
        "import django, logging; django.setup(); "
        "logging.getLogger('django.server').info('GET / 200'); "
        "logging.getLogger('django.request').warning('Not Found: /x')"
    )
    env = {**os.environ, "DEBUG": "1", "LOG_FORMAT": "json",
           "DJANGO_SETTINGS_MODULE": "portal.settings",
           "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    messages = [line["message"] for line in lines if line["logger"].startswith("django")]
    assert messages == ["GET / 200", "Not Found: /x"]
