"""The scheduling core: pure Python, no Django import, no clock, no I/O.

``schedule(snapshot) -> Decisions`` is the one entry point the live loop, the simulator, the
benchmark and the tests drive.
"""

from scheduling.engine.model import (
    BudgetNode,
    Decisions,
    Defund,
    Displacement,
    Explanation,
    HeldReservation,
    Node,
    PendingInfo,
    PendingJob,
    Policy,
    Preempt,
    Reservation,
    RunningJob,
    Snapshot,
    Standing,
    Start,
)

__all__ = [
    "BudgetNode",
    "Decisions",
    "Displacement",
    "Defund",
    "Explanation",
    "HeldReservation",
    "Node",
    "PendingInfo",
    "PendingJob",
    "Policy",
    "Preempt",
    "Reservation",
    "RunningJob",
    "Snapshot",
    "Standing",
    "Start",
    "schedule",
]


def schedule(snapshot: Snapshot) -> Decisions:
    """One scheduling pass: see scheduling.engine.passes for the steps."""
    from scheduling.engine.passes import run_pass

    return run_pass(snapshot)
