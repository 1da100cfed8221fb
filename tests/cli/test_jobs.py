"""submit, queue, status, why and cancel against a live server, with --json parsed."""

import shlex

import pytest

from scheduling.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def submit(shell, *args, gpus=8, name="train"):
    done = shell.run(
        "submit",
        "--project",
        "nlp/olmo",
        "--cluster",
        "jupiter",
        "--gpus",
        gpus,
        "--min-runtime",
        "1h",
        "--sim-duration",
        "10h",
        "--name",
        name,
        "--json",
        *args,
    )
    assert done.code == 0, done.err
    return done.json()


def test_submit_prints_the_new_jobs_id(terminal, researcher, jupiter):
    shell = terminal("researcher")
    done = shell.run(
        "submit",
        "-p",
        "nlp/olmo",
        "-c",
        "jupiter",
        "-g",
        "8",
        "--min-runtime",
        "1h30m",
        "--",
        "python",
        "train.py",
    )
    assert done.code == 0, done.err
    job = Job.objects.get(pk=int(done.out.strip()))
    assert job.owner == researcher
    assert job.project.slug_path == "nlp/olmo"
    assert job.min_runtime_s == 5400
    assert job.name == "python"
    assert job.command == "python train.py"


def test_words_after_the_dashes_reach_the_job_exactly(terminal, researcher, jupiter):
    words = ["python", "-c", "print('a  b')", "$HOME", "--lr", "3e-4", "semi;colon", ""]
    job = submit(terminal("researcher"), "--", *words)
    assert shlex.split(job["command"]) == words
    assert shlex.split(Job.objects.get(pk=job["id"]).command) == words


def test_a_job_file_gives_the_fields_and_flags_win(terminal, researcher, jupiter, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: from-file\nproject: nlp/olmo\ncluster: jupiter\ngpus: 8\nmin_runtime: 2h\n"
        "resumable: false\ncommand: [python, train.py, --tag, 'two words']\n"
        "env: {WANDB_PROJECT: olmo}\n"
    )
    done = terminal("researcher").run("submit", spec, "--gpus", "4", "--json")
    assert done.code == 0, done.err
    job = done.json()
    assert (job["name"], job["gpus"], job["min_runtime_s"]) == ("from-file", 4, 7200)
    assert job["resumable"] is False
    assert shlex.split(job["command"]) == ["python", "train.py", "--tag", "two words"]
    assert job["env"] == {"WANDB_PROJECT": "olmo"}


def test_queue_status_why_and_cancel_follow_a_job_through_the_scheduler(
    terminal, researcher, jupiter, run_pass
):
    shell = terminal("researcher")
    big = submit(shell, gpus=16, name="big")
    run_pass(jupiter)
    small = submit(shell, gpus=8, name="small")
    run_pass(jupiter)

    rows = shell.run("queue", "--json").json()
    assert [(r["name"], r["state"]) for r in rows] == [("big", "running"), ("small", "pending")]
    waiting = rows[1]
    assert waiting["queue_position"] == 1
    assert waiting["pending_reason"]["code"] == "Resources"

    table = shell.run("queue", "--cluster", "jupiter", "--mine")
    assert table.code == 0
    header, first, second = table.out.splitlines()[:3]
    assert header.split()[:3] == ["ID", "NAME", "USER"]
    assert first.split()[:2] == [str(big["id"]), "big"] and first.split()[-1] == "jupiter-[00-01]"
    assert second.split()[:2] == [str(small["id"]), "small"] and "Resources" in second
    assert "\x1b[" not in table.out  # no colour when stdout is not a terminal

    status = shell.run("status", small["id"], "--json").json()
    assert status["state"] == "pending" and status["queue_position"] == 1
    text = shell.run("status", small["id"]).out
    assert "Position" in text and "Resources:" in text

    why = shell.run("why", big["id"], "--json").json()
    assert why["funded"] is True
    assert why["funding_chain"] == ["nlp", "nlp/olmo"]
    assert why["gpu_hours_per_hour"] == 16.0
    assert [level["path"] for level in why["standing"]] == ["nlp", "nlp/olmo"]
    block = shell.run("why", big["id"]).out
    assert "Paid by" in block and "nlp › nlp/olmo" in block
    assert "16 GPU-hours per hour" in block
    assert "protected until" in block and "Preemptible by" in block
    assert "Standing" in block and "nlp/olmo" in block
    pending_why = shell.run("why", small["id"]).out
    assert "Waiting" in pending_why and "Resources" in pending_why

    cancelled = shell.run("cancel", small["id"])
    assert cancelled.code == 0
    assert cancelled.out.strip() == f"Job {small['id']} (small) is cancelled."
    assert Job.objects.get(pk=small["id"]).state == Job.State.CANCELLED
    assert [r["name"] for r in shell.run("queue", "--json").json()] == ["big"]
    ended = shell.run("queue", "--state", "cancelled", "--json").json()
    assert [r["id"] for r in ended] == [small["id"]]


def test_status_watch_stops_when_the_job_ends_and_queue_watch_on_ctrl_c(
    terminal, researcher, jupiter, monkeypatch
):
    shell = terminal("researcher")
    job = submit(shell)
    naps = []

    def sleep(seconds):  # the second nap is interrupted, as by Ctrl-C
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("allot_cli.watch.time.sleep", sleep)
    watched = shell.run("queue", "--watch", "--interval", "2")
    assert watched.code == 0 and naps == [2.0, 2.0]
    assert watched.out.count("every 2s, Ctrl-C to stop") == 2  # refreshed once, then stopped
    assert watched.out.count(f"{job['id']}  train") == 2
    shell.run("cancel", job["id"])
    done = shell.run("status", job["id"], "--watch", "--json")
    assert done.code == 0
    [line] = done.out.splitlines()  # one JSON document per refresh, and it had ended
    assert '"state": "cancelled"' in line


def test_queue_shows_only_what_the_caller_may_see(terminal, researcher, outsider, jupiter):
    submit(terminal("researcher"))
    assert terminal("outsider").run("queue", "--json").json() == []
    assert "No jobs." in terminal("outsider").run("queue").out
