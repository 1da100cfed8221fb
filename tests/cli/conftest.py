"""The CLI against a live server: pytest-django's ``live_server`` answers the real API, the
CLI runs in-process through Click's runner (its own config file per user, in tmp_path), and
scheduling passes are driven from the test, as beat would drive them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from allot_cli.main import cli
from click.testing import CliRunner

from scheduling.models import Cluster, Node
from tests.budgets.factories import GpuTypeFactory


@pytest.fixture
def server(live_server, settings, eager_celery):
    """The live server's URL; dispatch tasks run in-process right after a pass commits."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    return live_server.url


@pytest.fixture
def jupiter(transactional_db, tmp_path):
    """A simulated cluster of 2 nodes × 8 H100: one 16-GPU job fills it. Jobs run in real
    time (speed 1) for their simulated duration, so nothing finishes during a test."""
    GpuTypeFactory(name="H100", cost_factor="1.000")
    cluster = Cluster.objects.create(
        name="jupiter",
        gpu_type="H100",
        options={
            "nodes": "2",
            "gpus_per_node": "8",
            "speed": "1",
            "state_dir": str(tmp_path / "sim"),
        },
    )
    for index in range(2):
        Node.objects.create(cluster=cluster, name=f"jupiter-{index:02d}", gpus=8, gpu_type="H100")
    return cluster


@pytest.fixture
def run_pass():
    from scheduling import passes

    def run(cluster):
        return passes.run_pass(cluster.pk)

    return run


class Terminal:
    """One user's shell: a config file of their own, and ``run(*args)`` → the result with
    ``code``, ``out``, ``err`` and ``json()``."""

    def __init__(self, config_path, env=None):
        self.config_path = config_path
        self.env = {"ALLOT_CONFIG": str(config_path), "ALLOT_URL": None, "ALLOT_TOKEN": None}
        self.env.update(env or {})

    def run(self, *args, input=None, env=None):
        runner = CliRunner()
        result = runner.invoke(
            cli, [str(a) for a in args], input=input, env={**self.env, **(env or {})}
        )
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback would reach the user: fail loudly here
        return SimpleNamespace(
            code=result.exit_code,
            out=result.stdout,
            err=result.stderr,
            json=lambda: json.loads(result.stdout),
        )


@pytest.fixture
def terminal(tmp_path, server):
    """``terminal("researcher")``: a shell logged in as that persona (password "demo")."""

    def open_as(username=None):
        shell = Terminal(tmp_path / (username or "nobody") / "config.toml")
        if username:
            done = shell.run(
                "login",
                "--url",
                server,
                "--username",
                username,
                "--password-stdin",
                input="demo\n",
            )
            assert done.code == 0, done.err
        return shell

    return open_as
