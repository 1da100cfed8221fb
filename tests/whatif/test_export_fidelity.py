"""The export is exact: a workload the live loop recorded, exported as files and replayed by
the simulator, makes the same decisions the live loop made — every start (with its nodes and
funding), preemption and finish, at the same second.

The live side is the shared driver of the simulator/live agreement tests
(``tests/engine/sim_live.py``): jobs submitted through the service, the simulated backend
synced, usage charged, passes run, on a controlled clock. The records are then exported as of
the horizon — finished jobs with their real work, running ones with their work so far — and
replayed from the written files, as ``manage.py simulate`` would.
"""

import datetime as dt

import pytest
from django.core.management import call_command

from scheduling.engine.sim import Simulator, load_scenario, load_trace
from scheduling.engine.sim.scenario import ClusterSpec
from scheduling.models import Job
from scheduling.services import cancel_job
from tests.engine.sim_live import HOUR, T0, Case, LiveLoop, make_run_pass
from tests.engine.test_sim_live_agreement import SCENARIOS
from whatif.export import export_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_pass(django_capture_on_commit_callbacks, monkeypatch):
    return make_run_pass(django_capture_on_commit_callbacks, monkeypatch)


def _case(name: str) -> Case:
    budgets, jobs = SCENARIOS[name]
    return Case(
        clusters=(ClusterSpec("jupiter", "H100", 2, 8),),
        gpu_types={"H100": 1.0},
        budgets=tuple(budgets),
        jobs=tuple(jobs),
        horizon_s=6 * HOUR,
        step_s=300,
    )


@pytest.mark.parametrize("name", ["standing", "unfunded"])
def test_the_exported_workload_replays_to_the_starts_the_live_loop_made(name, tmp_path, run_pass):
    case = _case(name)
    live = LiveLoop(case, run_pass, tmp_path)
    expected = live.run()
    assert any(e[2] == "preempt" for e in expected)

    workload = export_workload(1, T0 + dt.timedelta(seconds=case.horizon_s))
    assert workload.start == T0 and workload.horizon_s == case.horizon_s
    scenario, trace = workload.write(tmp_path / "export")
    sim = Simulator(
        load_scenario(str(scenario)),
        load_trace(str(trace)),
        "fairshare",
        until_s=workload.horizon_s,
        pass_interval_s=case.step_s,
    )
    back = {v: k for k, v in live.ids.items()}
    replayed = sorted(
        (int(t), back[job], event, nodes, funded)
        for t, _, _, job, event, nodes, funded in sim.run().events
        if event != "submit" and t < case.horizon_s
    )
    assert replayed == expected


def test_export_workload_writes_files_that_simulate_replays(
    recorded, researcher, at_as_of, tmp_path
):
    cancelled = Job.objects.filter(owner=researcher).order_by("pk").last()
    cancel_job(researcher, cancelled.pk)  # it never ran: it used nothing, and is left out
    out = tmp_path / "out"
    call_command("export_workload", str(out), "--weeks", "1")
    trace = (out / "trace.csv").read_text().splitlines()
    assert (
        trace[0]
        == "job_id,submit_s,project,user,gpus,duration_s,min_runtime_s,resumable,kind,cluster"
    )
    assert len(trace) == 60
    assert not any(row.startswith(f"{cancelled.pk},") for row in trace)
    assert trace[1].split(",")[2:] == [
        "nlp/olmo", "researcher", "2", "7200.0", "600", "true", "batch", "jupiter"
    ]  # fmt: skip
    call_command(
        "simulate", str(out / "scenario.yaml"), str(out / "trace.csv"),
        "--until", "21599", "--json", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert '"nlp/tulu"' in (tmp_path / "r.json").read_text()
