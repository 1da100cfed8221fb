"""login and the exit codes a terminal user and a script rely on: 0 done, 1 refused (the
server's message naming the field), 2 bad usage, 3 unreachable or not authenticated."""

import os
import socket
import stat
import tomllib

import pytest

from scheduling.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_login_saves_url_and_token_readable_by_the_owner_alone(terminal, server, researcher):
    shell = terminal()
    done = shell.run(
        "login",
        "--url",
        server,
        "-u",
        "researcher",
        "--password-stdin",
        "--json",
        input="demo\n",
    )
    assert done.code == 0, done.err
    assert done.json()["username"] == "researcher"
    assert stat.S_IMODE(os.stat(shell.config_path).st_mode) == 0o600
    saved = tomllib.loads(shell.config_path.read_text())
    assert saved["url"] == server and saved["username"] == "researcher"
    assert len(saved["token"]) == 64
    assert shell.run("queue", "--json").json() == []


def test_login_prompts_for_what_it_was_not_given(terminal, server, researcher):
    shell = terminal()
    done = shell.run("login", input=f"{server}\nresearcher\ndemo\n")
    assert done.code == 0, done.err
    assert f"Logged in to {server} as researcher" in done.out
    assert "demo" not in done.out  # the password is not echoed


def test_a_wrong_password_is_refused_in_one_line(terminal, server, researcher):
    shell = terminal()
    done = shell.run(
        "login", "--url", server, "-u", "researcher", "--password-stdin", input="wrong\n"
    )
    assert done.code == 1
    assert done.err.strip() == "allot: Unable to log in with those credentials."
    assert not shell.config_path.exists()


def test_environment_overrides_the_file(terminal, server, researcher, jupiter):
    logged_in = terminal("researcher")
    token = tomllib.loads(logged_in.config_path.read_text())["token"]
    fresh = terminal()  # no config file at all
    done = fresh.run("queue", "--json", env={"ALLOT_URL": server, "ALLOT_TOKEN": token})
    assert done.code == 0 and done.json() == []
    assert fresh.run("queue").code == 3


def test_not_logged_in_is_exit_3(terminal, server):
    done = terminal().run("queue")
    assert done.code == 3
    assert done.err.strip().startswith("allot: not logged in: run `allot login`")


def test_a_bad_token_is_exit_3(terminal, server, researcher):
    done = terminal("researcher").run("budgets", env={"ALLOT_TOKEN": "f" * 64})
    assert done.code == 3
    assert "not authenticated" in done.err and "Invalid token" in done.err
    assert len(done.err.strip().splitlines()) == 1


def test_an_unreachable_server_is_exit_3(terminal, server, researcher):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = terminal("researcher").run("queue", env={"ALLOT_URL": f"http://127.0.0.1:{port}"})
    assert done.code == 3
    assert done.err.strip() == f"allot: cannot reach http://127.0.0.1:{port}: connection refused"


@pytest.mark.parametrize(
    "args, says",
    [
        (["submit", "--cluster", "jupiter", "--gpus", "x", "--min-runtime", "1h"], "--gpus"),
        (["submit", "--cluster", "jupiter", "--gpus", "8", "--min-runtime", "2x"], "duration"),
        (["submit", "--gpus", "8", "--min-runtime", "1h", "--", "true"], "missing --cluster"),
        (["status"], "Missing argument"),
        (["frobnicate"], "No such command"),
        (["queue", "--state"], "requires an argument"),
    ],
)
def test_bad_usage_is_exit_2_before_any_request(terminal, server, researcher, args, says):
    done = terminal("researcher").run(*args)
    assert done.code == 2
    assert says in done.err
    assert done.err.startswith("allot: ") and len(done.err.strip().splitlines()) == 1
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "args, field",
    [
        (["--cluster", "nowhere", "--gpus", "8", "--min-runtime", "1h"], "cluster"),
        (["--cluster", "jupiter", "--gpus", "100001", "--min-runtime", "1h"], "gpus"),
        (["--cluster", "jupiter", "--gpus", "8", "--min-runtime", "30s"], "min_runtime_s"),
        (["--cluster", "jupiter", "--gpus", "8", "--min-runtime", "1h", "-p", "vision"], "project"),
        (["--cluster", "jupiter", "--gpus", "8", "--min-runtime", "1h", "-e", "ALLOT_X=1"], "env"),
    ],
)
def test_a_refused_submission_is_exit_1_naming_the_field(
    terminal, researcher, jupiter, args, field
):
    done = terminal("researcher").run("submit", *args, "--", "true")
    assert done.code == 1, done.out
    line = done.err.strip()
    assert line.startswith(f"allot: {field}: "), line
    assert len(line.splitlines()) == 1
    assert not Job.objects.exists()


def test_cancelling_someone_elses_job_is_refused(terminal, researcher, project_lead, jupiter):
    job = terminal("researcher").run(
        "submit",
        "-c",
        "jupiter",
        "-g",
        "8",
        "--min-runtime",
        "1h",
        "-p",
        "nlp/olmo",
        "--",
        "true",
    )
    job_id = int(job.out)
    done = terminal("project_lead").run("cancel", job_id)
    assert done.code == 1
    assert "Only the job's owner or a cluster admin" in done.err
    missing = terminal("researcher").run("status", 999999)
    assert missing.code == 1 and missing.err.strip() == "allot: No such job"
