"""The engine's plain data: frozen dataclasses in (a Snapshot), frozen dataclasses out (Decisions).

Everything here is Django-free so the live loop, the simulator, the benchmark and the tests
all speak the same vocabulary. Times are float seconds on one clock (the live loop passes epoch
seconds, the simulator seconds since the trace start). GPU-seconds are cost-normalised: one
second on one GPU of a type whose cost factor is 2.0 counts as 2 GPU-seconds.

Fields may be added (with defaults); none is renamed, because the live loop codes against them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EIGHT_HOURS_S = 8 * 3600.0


@dataclass(frozen=True)
class BudgetNode:
    """One node of the budget tree. ``path`` is slash-separated ("nlp/olmo"; top level "nlp").

    ``usage_gpu_s`` is this node's OWN windowed usage (jobs charged directly to it); the engine
    rolls subtree usage up itself. ``remaining_gpu_s`` is the balance left this period for the
    node's whole subtree (grant − charged − held, its descendants included): a job is funded
    only while its project AND every ancestor given here have something left.
    """

    path: str
    share: float
    usage_gpu_s: float = 0.0
    remaining_gpu_s: float = 0.0


@dataclass(frozen=True)
class Node:
    name: str
    cluster: str
    gpu_type: str
    gpus: int
    drained: bool = False


@dataclass(frozen=True)
class RunningJob:
    """A job holding GPUs now. ``project`` "" means no project (always unfunded)."""

    id: str
    project: str
    user: str
    gpus: int
    nodes: tuple[tuple[str, int], ...]  # (node name, GPUs used there)
    start_s: float
    protected_until_s: float
    funded: bool
    kind: str = "batch"
    resumable: bool = True
    submit_s: float = 0.0
    protection_source: str = "contract"  # or e.g. "exception #12"


@dataclass(frozen=True)
class PendingJob:
    id: str
    project: str
    user: str
    gpus: int
    submit_s: float
    min_runtime_s: float
    cluster: str | None = None
    gpu_type: str | None = None
    kind: str = "batch"
    resumable: bool = True
    priority: str = "normal"  # low|normal|high|urgent: only the "priority" baseline reads it
    held: bool = False
    max_protection_s: float | None = None  # an approved exception raising the 8 h cap


@dataclass(frozen=True)
class Reservation:
    """Capacity set aside by an approved exception (a reservation for a big run)."""

    id: str
    cluster: str
    gpus: int
    start_s: float
    end_s: float
    project: str = ""


@dataclass(frozen=True)
class Displacement:
    """Memory of one preemption for standing: job ``by_id`` of ``by_project`` preempted job
    ``victim_id`` of ``victim_project`` at ``at_s``. While it lasts, no job of the victim's
    side of the tree (the victim's ancestor at the first level where the two paths differ)
    preempts ``by_id`` for standing: see ``Policy.displacement_memory_s``. Decisions carry the
    memory forward; the caller passes it to the next snapshot."""

    victim_id: str
    victim_project: str
    by_id: str
    by_project: str
    at_s: float


@dataclass(frozen=True)
class Policy:
    name: str = "fairshare"  # "fairshare" | "priority" | "fifo"
    max_min_runtime_s: float = EIGHT_HOURS_S
    interactive_pool_gpus: dict[str, int] = field(default_factory=dict)  # per cluster
    interactive_per_user: int = 1  # concurrent interactive sessions per user
    interactive_max_runtime_s: float = 2 * 3600.0
    preemption: bool = True  # False: waiting jobs never preempt for standing (drains still do)
    # Every funded start is protected at least this long, whatever its declared min runtime:
    # a job that could be preempted the instant it starts would let two jobs swap places
    # pass after pass (the no-ping-pong guarantee needs protection to outlast a pass).
    min_protection_s: float = 300.0
    # No ping-pong across passes: a job that displaced another for standing is not displaced
    # back by the victim's side of the tree for this long, unless the displacer's side has
    # since used more than 1 / displacement_release_lfs times its share (LFS below it). With
    # two siblings, one is over its share exactly when the other is under, so the standing
    # alone has no dead band; 8 h is the longest protection a contract can claim anyway.
    displacement_memory_s: float = EIGHT_HOURS_S
    displacement_release_lfs: float = 0.5

    def __hash__(self) -> int:  # dict fields are not hashable; the name is enough to key caches
        return hash((self.name, self.max_min_runtime_s, self.interactive_per_user))


@dataclass(frozen=True)
class Snapshot:
    now_s: float
    nodes: tuple[Node, ...]
    budgets: tuple[BudgetNode, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    gpu_cost: dict[str, float] = field(default_factory=dict)  # gpu_type -> factor (default 1.0)
    user_usage_gpu_s: dict[tuple[str, str], float] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()
    policy: Policy = field(default_factory=Policy)
    displacements: tuple[Displacement, ...] = ()  # the memory Decisions.displacements returned
    # True when every budget node's remaining_gpu_s is its subtree balance (the live loop and
    # the simulator): then every ancestor's balance limits funding, not only the project's.
    # Snapshots that give balances for leaf projects only leave it False.
    chain_balances: bool = False


# ---- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    job_id: str
    nodes: tuple[tuple[str, int], ...]
    funded: bool
    protected_until_s: float


@dataclass(frozen=True)
class Preempt:
    job_id: str
    reason: str  # a sentence a researcher can read
    by_job_id: str | None
    requeue: bool  # True: back to the queue keeping its submit time (restarts if not resumable)


@dataclass(frozen=True)
class Defund:
    """A funded run past its protection whose budget (its project's or an ancestor's) has run
    out: from ``at_s`` it is unallocated, no longer charged, and preemptible by anyone."""

    job_id: str
    at_s: float
    path: str  # the budget node that ran out
    reason: str


@dataclass(frozen=True)
class HeldReservation:
    """Nodes held for a waiting job that could not start even with preemption."""

    job_id: str
    nodes: tuple[str, ...]
    start_s: float


@dataclass(frozen=True)
class PendingInfo:
    code: str  # Priority|Resources|Reservation|Drain|Unfunded|ExceedsCapacity|Held|InteractiveLimit
    message: str
    position: int  # 1-based position in its cluster's queue (global when no cluster is set)
    estimated_start_s: float | None


@dataclass(frozen=True)
class Standing:
    path: str
    share: float  # normalised among siblings
    usage_share: float  # normalised among siblings
    level_fair_share: float  # share / usage_share (inf when the node used nothing)


@dataclass(frozen=True)
class Explanation:
    job_id: str
    funded: bool
    funding_chain: tuple[str, ...]  # ("nlp", "nlp/olmo")
    gpu_hours_per_hour: float  # cost-normalised rate
    protected_until_s: float
    protection_source: str
    standing: tuple[Standing, ...]
    preemptible_by: str  # a sentence


@dataclass(frozen=True)
class Decisions:
    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    reservations: tuple[HeldReservation, ...] = ()
    pending: dict[str, PendingInfo] = field(default_factory=dict)
    explanations: dict[str, Explanation] = field(default_factory=dict)
    drains: dict[str, float] = field(default_factory=dict)  # drained node -> time it is empty
    # The displacement memory to pass to the next snapshot: the input's entries whose
    # displacer still runs and that have not expired, plus this pass's preemptions for standing.
    displacements: tuple[Displacement, ...] = ()
    defunded: tuple[Defund, ...] = ()
