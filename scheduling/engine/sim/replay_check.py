"""Every pass of a replay against a pass without the context: the speed-ups' agreement check.

``python -m scheduling.engine.sim.replay_check SCENARIO TRACE --from S --until S
[--policies fairshare,priority,fifo] [--show N]``

The simulator hands every pass the same ``PassContext``: the queue kept in order between
passes, the walk's jumps over settled runs, and the repeat memo that answers a pass which
provably repeats the last quiet one without running it. Here every pass of the replay is also
run without it, from the same snapshot, as the live loop runs it; the two must decide the same
(starts, preemptions, holds, drain times, displacements, defunded runs) and agree whether the
pass stopped at its victim-search budget (which tells the simulator when to pass next). The
tests hold a few days to this (``tests/engine/test_pass_context.py``); this command holds a
whole slice, for instance the replay benchmark's four weeks (about five minutes here: every
pass runs twice, the second time over the whole backlog). Exit status 1 when any pass differs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from scheduling.engine.model import Decisions, Snapshot
from scheduling.engine.sim import simulator
from scheduling.engine.sim.compare import replay_parser
from scheduling.engine.sim.scenario import InputError, Scenario, TraceJob, load_scenario, load_trace


def decided(decisions: Decisions) -> tuple:
    """What a pass decides, apart from what it reports (pending reasons, explanations)."""
    return (
        decisions.starts,
        decisions.preemptions,
        decisions.reservations,
        decisions.drains,
        decisions.displacements,
        decisions.defunded,
    )


@dataclass
class Agreement:
    policy: str
    passes: int = 0
    answered: int = 0  # by the repeat memo: the last pass's decisions, not computed again
    differ: list[str] = field(default_factory=list)  # one line per pass that differs


class _Checked(simulator.Simulator):
    """A replay whose every pass is also run without the context."""

    def __init__(self, *args, agreement: Agreement, **kw) -> None:
        super().__init__(*args, **kw)
        self.agreement = agreement
        self._last: Decisions | None = None

    def _engine(self, snapshot: Snapshot) -> tuple[Decisions, bool]:
        got = super()._engine(snapshot)
        plain = simulator._run_pass(snapshot, None)
        a = self.agreement
        a.passes += 1
        a.answered += got[0] is self._last
        self._last = got[0]
        if decided(got[0]) != decided(plain[0]) or got[1] != plain[1]:
            a.differ.append(
                f"t={snapshot.now_s:.0f}: with the context {_brief(got)}, without {_brief(plain)}"
            )
        return got


def _brief(got: tuple[Decisions, bool]) -> str:
    d, budget_hit = got
    return (
        f"{len(d.starts)} starts, {len(d.preemptions)} preemptions, "
        f"{len(d.reservations)} holds, {len(d.defunded)} defunded"
        + (", at the search budget" if budget_hit else "")
    )


def check(scenario: Scenario, jobs: list[TraceJob], policy: str, until_s: float) -> Agreement:
    agreement = Agreement(policy)
    replay = _Checked(
        scenario, jobs, policy, until_s=until_s, record_events=False, agreement=agreement
    )
    replay.run()
    return agreement


def main(argv: list[str] | None = None) -> int:
    ap = replay_parser(__doc__)
    ap.add_argument("--policies", default="fairshare,priority,fifo")
    ap.add_argument("--show", type=int, default=5, help="passes that differ to print, per policy")
    args = ap.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
        jobs = load_trace(args.trace, args.until, args.from_s)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status = 0
    for policy in args.policies.split(","):
        a = check(scenario, jobs, policy, args.until)
        print(
            f"{policy}: {a.passes:,} passes ({a.answered:,} answered by the repeat memo), "
            f"{len(a.differ):,} differ from a pass without the context"
        )
        for line in a.differ[: args.show]:
            print(f"  {line}")
        status = status or (1 if a.differ else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
