"""The labelled baseline: priority inflation makes `priority` differ from `fifo`."""

import csv
import io
from contextlib import redirect_stdout
from pathlib import Path

from scheduling.engine.sim import simulate
from scheduling.engine.sim.compare import markdown
from scheduling.engine.sim.label import heaviest_projects, main
from scheduling.engine.sim.output import to_json
from scheduling.engine.sim.scenario import BudgetSpec, ClusterSpec, Scenario, TraceJob, load_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HOUR = 3600.0


def job(jid, submit, project, gpus=8, duration=HOUR, priority="normal"):
    return TraceJob(
        jid, submit, project, project, gpus, duration, HOUR, True, "batch", None, priority
    )


def test_the_heaviest_teams_are_those_that_submit_the_most_gpu_hours():
    jobs = [
        job("a", 0, "x/heavy", gpus=8),
        job("b", 0, "x/light", gpus=1),
        job("c", 0, "y/mid", gpus=4),
    ]
    assert heaviest_projects(jobs, 2) == ["x/heavy", "y/mid"]


def test_the_label_tool_marks_every_job_of_the_heaviest_teams_urgent(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_s,project,user,gpus,duration_s,min_runtime_s,resumable,kind,cluster\n"
        "j1,100,p/heavy,u,8,7200,3600,true,batch,\n"
        "j2,150,p/light,u,1,3600,3600,true,batch,\n"
        "j3,400,p/heavy,u,1,10,10,false,batch,\n"
    )
    out = io.StringIO()
    with redirect_stdout(out):
        main([str(trace), "--from", "100", "--heaviest", "1"])
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["job_id"], r["submit_s"], r["priority"]) for r in rows] == [
        ("j1", "0", "urgent"),
        ("j2", "50", "normal"),
        ("j3", "300", "urgent"),
    ]
    labelled = tmp_path / "l.csv"
    labelled.write_text(out.getvalue())
    assert [j.priority for j in load_trace(str(labelled))] == ["urgent", "normal", "urgent"]


def test_with_inflated_labels_priority_lets_the_loud_team_jump_the_queue_and_fifo_does_not():
    sc = Scenario(
        7,
        {"H100": 1.0},
        (ClusterSpec("c", "H100", 1, 8),),
        (BudgetSpec("loud", 100, 100), BudgetSpec("quiet", 100, 100)),
    )
    jobs = [job(f"q{i}", float(i), "quiet") for i in range(4)]
    jobs += [job(f"l{i}", 10.0 + i, "loud", priority="urgent") for i in range(4)]
    prio = to_json(simulate(sc, jobs, "priority"))["projects"]
    fifo = to_json(simulate(sc, jobs, "fifo"))["projects"]
    assert prio["loud"]["wait_p50_s"] < fifo["loud"]["wait_p50_s"]
    assert prio["quiet"]["wait_p50_s"] > fifo["quiet"]["wait_p50_s"]


def test_the_shipped_labelled_slice_marks_the_heaviest_teams_urgent():
    jobs = load_trace(str(EXAMPLES / "philly-labelled.csv"))
    urgent = {j.project for j in jobs if j.priority == "urgent"}
    assert urgent == set(heaviest_projects(jobs, 3))
    assert {j.priority for j in jobs} == {"urgent", "normal"}


def test_the_comparison_table_shows_wasted_and_fragmented_gpu_hours():
    row = {
        "policy": "fairshare",
        "share_distance": 0.1,
        "share_distance_active": 0.1,
        "utilization": 0.9,
        "wait_by_size": {},
        "jobs": {"preemptions": 3},
        "wasted_gpu_hours": 12.4,
        "fragmentation_gpu_hours": 7.6,
        "unfunded_gpu_hours": 1.0,
        "cpu_s": 2.0,
    }
    head, _, line = markdown([row]).splitlines()
    assert "wasted GPU-h" in head and "fragmented GPU-h" in head
    assert "| 3 | 12 | 8 | 1 | 2.0 |" in line
