"""``replay_check``: every pass of a replay against a pass without the context.

The command holds the simulator's speed-ups (the queue kept between passes, the walk's jumps,
the repeat memo) to the plain pass on a whole slice; here it runs on three Philly days, and on
the same days with a repeat memo that ignores standing and balances (it answers passes whose
standing moved, as a memo that forgot part of its signature would), which it must report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.engine import pass_repeat
from scheduling.engine.sim import replay_check
from scheduling.engine.sim.scenario import load_scenario, load_trace
from scheduling.engine.sim.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]
PHILLY = Path("/work/shared/traces/philly-vc.csv")
SLICE = ["--from", "3456000", "--until", str(3 * 86400)]

needs_trace = pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not here")


@needs_trace
def test_every_pass_of_three_philly_days_agrees_with_a_pass_without_the_context(capsys):
    args = [str(ROOT / "examples" / "philly-bench.yaml"), str(PHILLY), *SLICE]
    assert replay_check.main([*args, "--policies", "fairshare,fifo"]) == 0
    out = capsys.readouterr().out
    fair, fifo = out.splitlines()
    assert fair.startswith("fairshare: ") and fair.endswith(
        " 0 differ from a pass without the context"
    )
    assert "(0 answered" not in fair  # the memo answered some: they were checked too
    assert fifo.startswith("fifo: ") and fifo.endswith(" 0 differ from a pass without the context")


@needs_trace
def test_a_repeat_memo_blind_to_standing_and_balances_is_reported(monkeypatch, capsys):
    monkeypatch.setattr(pass_repeat.RepeatMemo, "_signature", lambda self, snap, tree, ctx: ())
    monkeypatch.setattr(pass_repeat.RepeatMemo, "_idle_ends", lambda self, *args: True)
    args = [str(ROOT / "examples" / "philly-bench.yaml"), str(PHILLY), *SLICE, "--show", "2"]
    assert replay_check.main([*args, "--policies", "fairshare"]) == 1
    head, *shown = capsys.readouterr().out.splitlines()
    assert not head.endswith(" 0 differ from a pass without the context")
    assert len(shown) == 2 and all(line.startswith("  t=") for line in shown)
    # e.g. "t=248160: with the context 0 starts, 0 preemptions, ..., without 4 starts, 8 ..."
    assert all(", without " in line for line in shown)


@needs_trace
def test_the_check_counts_every_pass_of_the_replay():
    scenario = load_scenario(str(ROOT / "examples" / "philly-bench.yaml"))
    jobs = load_trace(str(PHILLY), 86400.0, 3_456_000.0)
    got = replay_check.check(scenario, jobs, "fairshare", 86400.0)
    plain = simulate(scenario, jobs, "fairshare", until_s=86400.0, record_events=False)
    assert got.passes == plain.passes and got.differ == []


def test_a_bad_scenario_is_an_error_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: []\n")
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_s,duration_s,gpus,project,user\n")
    assert replay_check.main([str(bad), str(trace), "--until", "3600"]) == 2
    assert "bad.yaml" in capsys.readouterr().err
