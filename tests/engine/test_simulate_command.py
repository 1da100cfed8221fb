"""The simulate command follows the contract in ARCHITECTURE.md, without a database.

These tests carry no django_db mark: pytest-django refuses any database access, so a command
that touched the database would fail here."""

import csv
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.management.commands.simulate import Command

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(tmp_path, *extra, scenario=EXAMPLES / "small.yaml", trace=EXAMPLES / "small.csv"):
    out = tmp_path / "out.json"
    call_command("simulate", str(scenario), str(trace), "--json", str(out), *extra)
    return json.loads(out.read_text())


def test_the_command_skips_system_and_migration_checks():
    assert Command.requires_system_checks == [] and Command.requires_migrations_checks is False


def test_the_json_has_every_contract_key(tmp_path):
    data = run(tmp_path, "--policy", "fairshare")
    assert {
        "policy",
        "horizon_s",
        "utilization",
        "projects",
        "jobs",
        "drains",
        "unfunded_gpu_hours",
    } <= set(data)
    assert data["policy"] == "fairshare"
    assert set(data["projects"]) == {"nlp/olmo", "nlp/tulu", "robotics"}  # leaves only
    for p in data["projects"].values():
        assert set(p) >= {
            "budget_share",
            "delivered_share",
            "allocated_gpu_hours",
            "unallocated_gpu_hours",
            "wait_p50_s",
            "wait_p95_s",
        }
    assert abs(data["projects"]["nlp/olmo"]["budget_share"] - 2 / 3 * 4 / 6) < 1e-6
    assert abs(sum(p["delivered_share"] for p in data["projects"].values()) - 1) < 1e-3
    assert set(data["jobs"]) >= {"submitted", "completed", "preemptions", "protected_preemptions"}
    assert data["jobs"]["submitted"] == 120 and data["jobs"]["completed"] == 120
    assert data["jobs"]["protected_preemptions"] == 0
    assert data["drains"][0]["node"] == "jupiter-03" and data["drains"][0]["requested_s"] == 7200
    assert data["drains"][0]["drained_s"] >= 7200
    assert data["unfunded_gpu_hours"] > 0  # the example has jobs with no project


def test_events_are_in_time_order_with_frees_before_starts(tmp_path):
    events = tmp_path / "events.csv"
    run(tmp_path, "--events", str(events), "--until", "40000")
    rows = list(csv.DictReader(events.open()))
    assert list(rows[0]) == ["t_s", "job_id", "event", "nodes", "funded"]
    rank = {"finish": 0, "preempt": 1, "submit": 2, "start": 3}
    keys = [(float(r["t_s"]), rank[r["event"]]) for r in rows]
    assert keys == sorted(keys)
    assert {r["event"] for r in rows} == set(rank)
    on = {}
    for r in rows:
        assert (r["funded"] in ("true", "false")) == (r["event"] == "start")
        # every row but a submit names the nodes: where it starts, or the ones it leaves
        assert bool(r["nodes"]) == (r["event"] != "submit")
        if r["event"] == "start":
            on[r["job_id"]] = r["nodes"]
        elif r["event"] != "submit":
            assert r["nodes"] == on.pop(r["job_id"])
    assert all(float(r["t_s"]) <= 40000 for r in rows)


def test_the_baselines_run_and_plot(tmp_path):
    plot, events = tmp_path / "plot.png", tmp_path / "events.csv"
    data = run(tmp_path, "--policy", "priority", "--plot", str(plot), "--events", str(events))
    assert data["policy"] == "priority"
    on_node, preempted = {}, []
    for r in csv.DictReader(events.open()):
        if r["event"] == "start":
            on_node[r["job_id"]] = r["nodes"]
        if r["event"] == "preempt":
            preempted.append(on_node[r["job_id"]])
    # The baselines never preempt for standing; only the drain of jupiter-03 stops jobs.
    assert all("jupiter-03" in nodes for nodes in preempted)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run(tmp_path, "--policy", "fifo")["policy"] == "fifo"


def test_a_bad_trace_row_names_file_line_and_field(tmp_path):
    trace = tmp_path / "bad.csv"
    lines = (EXAMPLES / "small.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[4] = "many"  # gpus
    lines[3] = ",".join(cells)
    trace.write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError, match=r"bad\.csv:4: field 'gpus'"):
        run(tmp_path, trace=trace)


def test_a_bad_scenario_names_file_line_and_field(tmp_path):
    scenario = tmp_path / "bad.yaml"
    text = (EXAMPLES / "small.yaml").read_text().replace("nodes: 4,", "nodes: four,")
    scenario.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "four" in t)
    with pytest.raises(CommandError, match=rf"bad\.yaml:{line}: field 'nodes'"):
        run(tmp_path, scenario=scenario)


def test_a_missing_trace_column_is_named(tmp_path):
    trace = tmp_path / "cols.csv"
    trace.write_text("job_id,submit_s\nj1,0\n")
    with pytest.raises(CommandError, match=r"cols\.csv:1: field 'project'"):
        run(tmp_path, trace=trace)
