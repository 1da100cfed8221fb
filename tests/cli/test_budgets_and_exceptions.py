"""budgets, and an exception from request to approval by someone allowed to approve it."""

import pytest

from exceptions.models import ExceptionRequest

pytestmark = pytest.mark.django_db(transaction=True)


def test_budgets_shows_the_nodes_the_caller_may_see(terminal, manager, researcher):
    rows = terminal("manager").run("budgets", "--json").json()
    paths = {row["path"] for row in rows}
    assert {"nlp", "nlp/olmo", "nlp/tulu"} <= paths and "vision" not in paths
    olmo = next(row for row in rows if row["path"] == "nlp/olmo")
    assert olmo["grant_gpu_hours"] == 3000 and olmo["remaining_gpu_hours"] == 3000
    assert olmo["burn_gpu_hours_per_day"] == 0

    table = terminal("manager").run("budgets", "--under", "nlp").out.splitlines()
    assert table[0].split() == [
        "PATH",
        "GRANT",
        "USED",
        "HELD",
        "LEFT",
        "USED%",
        "BURN/DAY",
        "SHARE",
    ]
    assert [line.split()[0] for line in table[1:]] == ["nlp", "nlp/olmo", "nlp/tulu"]
    assert table[2].split()[1:6] == ["3,000.0", "0.0", "0.0", "3,000.0", "0%"]


def test_a_protection_request_is_filed_listed_and_approved_by_a_cluster_admin(
    terminal, researcher, cluster_admin, jupiter, run_pass
):
    asker = terminal("researcher")
    job_id = int(
        asker.run(
            "submit",
            "-c",
            "jupiter",
            "-g",
            "8",
            "--min-runtime",
            "1h",
            "-p",
            "nlp/olmo",
            "--sim-duration",
            "20h",
            "--",
            "python",
            "train.py",
        ).out
    )
    run_pass(jupiter)
    filed = asker.run(
        "exception",
        "protection",
        job_id,
        "--hours",
        "12",
        "--why",
        "final eval before the deadline",
    )
    assert filed.code == 0, filed.err
    request = ExceptionRequest.objects.get()
    assert filed.out.strip() == f"Request {request.pk} (extended_protection) is submitted."

    own = asker.run("exception", "approve", request.pk)
    assert own.code == 1
    assert own.err.startswith("allot: ") and len(own.err.strip().splitlines()) == 1

    approver = terminal("cluster_admin")
    listed = approver.run("exception", "list", "--state", "submitted", "--json").json()
    assert [(row["id"], row["job"], row["requester"]) for row in listed] == [
        (request.pk, job_id, "researcher")
    ]
    assert f"job {job_id}: 12.00 h protected" in approver.run("exception", "list").out
    decided = approver.run("exception", "approve", request.pk, "--comment", "ok", "--json")
    assert decided.code == 0, decided.err
    assert decided.json()["state"] in {"approved", "active"}
    shown = asker.run("exception", "show", request.pk).out
    assert "cluster_admin" in shown and "final eval" in shown


def test_exception_refusals_name_the_field(terminal, researcher, jupiter):
    shell = terminal("researcher")
    done = shell.run("exception", "protection", 999999, "--hours", "12", "--why", "x")
    assert done.code == 1 and done.err.startswith("allot: job: ")
    topup = shell.run("exception", "topup", "vision", "--gpu-hours", "10", "--why", "x")
    assert topup.code == 1 and topup.err.startswith("allot: node: ")
    both = shell.run("exception", "reservation", "-c", "jupiter", "-g", "8", "--start", "1h")
    assert both.code == 2 and "--end" in both.err


def test_a_reservation_and_a_topup_reach_the_server_with_their_fields(
    terminal, researcher, jupiter
):
    shell = terminal("researcher")
    reserved = shell.run(
        "exception",
        "reservation",
        "-c",
        "jupiter",
        "-g",
        "8",
        "--start",
        "2h",
        "--for",
        "6h",
        "-p",
        "nlp/olmo",
        "--why",
        "7B run",
        "--json",
    )
    assert reserved.code == 0, reserved.err
    row = reserved.json()
    assert (row["kind"], row["cluster"], row["gpus"], row["node"]) == (
        "reservation",
        "jupiter",
        8,
        "nlp/olmo",
    )
    topup = shell.run("exception", "topup", "nlp/olmo", "--gpu-hours", "50", "--why", "sweep")
    assert topup.code == 0, topup.err
    withdrawn = shell.run("exception", "withdraw", row["id"], "--json").json()
    assert withdrawn["state"] == "withdrawn"
