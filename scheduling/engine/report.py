"""What a pass tells people: pending reasons with position and estimated start, explanations
for running jobs, and when drained nodes will be empty.

Estimated starts come from a fluid model per pool, walked in queue order: GPUs free now are
available now, a running job's GPUs at the end of its protection (the earliest moment the
contract lets them go), and a job the model starts gives its GPUs back at the end of its own
protection. It ignores fragmentation, so it is an optimistic estimate, and it is O(n log n).

An estimate is only given when it rests on ends the job can count on: GPUs free now, unfunded
work (it yields at once), and funded work it may preempt once its protection ends (its project
ranks strictly below). A protection end of work that need not yield to it is not an end (the
engine knows no durations), so a job that needs such GPUs gets no time ("unknown") and a
message naming the projects whose jobs it waits for. Nodes held for a job with no known start
say the same.

Explanations for running jobs and drain times are in ``explain.py`` (re-exported here).
"""

from __future__ import annotations

import heapq
import math
from heapq import heappop, heappush
from itertools import chain
from typing import Any

from scheduling.engine.explain import drain_times, explanations
from scheduling.engine.model import PendingInfo, PendingJob
from scheduling.engine.placement import Pool
from scheduling.engine.state import PassState

__all__ = ["MESSAGES", "drain_times", "explanations", "fast_new", "pending_infos"]

_new = object.__new__
# Compiled with mypyc (``sim/compiled.py``), the model's classes are native: no ``__dict__`` to
# fill, and their constructor is as cheap as this shortcut.
PLAIN = PendingInfo.__dictoffset__ != 0


def fast_new(cls, **fields):
    """Build a frozen dataclass without its generated ``__init__``: a pass creates one
    PendingInfo per waiting job, and the frozen ``__setattr__`` dance costs twice as much.
    Every field must be given (tests compare these objects with normally built ones)."""
    if cls.__dictoffset__ == 0:  # a native class (compiled)
        return cls(**fields)
    obj = _new(cls)
    obj.__dict__.update(fields)
    return obj


MESSAGES = {
    "Held": "Held: it will not start until it is released.",
    "Priority": "Jobs that rank higher in the budget tree are waiting for the same GPUs.",
    "InteractiveLimit": "The interactive limit is reached: {user} already has the allowed "
    "number of sessions, or the cluster's interactive pool is full.",
    "Drain": "Enough GPUs for it exist only on nodes drained for maintenance.",
    "ExceedsCapacity": "It asks for {gpus} GPUs, more than any allowed placement can give "
    "(one node, or whole nodes of one cluster and GPU type).",
    "Reservation": "Free GPUs are held for a larger job or an approved reservation, and this "
    "job would not end or become preemptible before that starts.",
}


def _message(code: str, job: PendingJob, pass_) -> str:
    if code == "Resources":
        held = pass_.holder_of.get(job.id)
        if held is not None and held[1] == math.inf:
            return (
                f"Waiting for {job.gpus} GPUs; nodes are held for it, but no start time is "
                f"known: it waits for jobs of {_names(held[2])} to finish (they rank at or "
                "above it, so it may not preempt them)."
            )
        if held is not None:
            return (
                f"Waiting for {job.gpus} GPUs; nodes are held for it and free up when the "
                "protections of the jobs on them end."
            )
        return f"Waiting for {job.gpus} GPUs to free up."
    if code == "Unfunded":
        if not job.project:
            return "It has no project, so it runs unfunded, only on GPUs no funded job can use."
        return (
            f"The remaining budget of {job.project} does not cover its protected window "
            f"({job.gpus} GPUs x min runtime); it runs unfunded, only on GPUs no funded job "
            "can use."
        )
    return MESSAGES[code].format(user=job.user, gpus=job.gpus)


def _never(victim: str, preemptor: str) -> bool:
    return False


def _names(projects) -> str:
    names = [p or "no project" for p in projects[:3]]
    more = f" and {len(projects) - 3} more" if len(projects) > 3 else ""
    return ", ".join(names) + more


def _fit_code(job: PendingJob, pools: list[Pool]) -> str:
    if any(p.fits_ever(job.gpus) for p in pools):
        return ""
    return "Drain" if any(p.fits_if_undrained(job.gpus) for p in pools) else "ExceedsCapacity"


def _on_held(job: PendingJob, pools: list[Pool]) -> bool:
    return any(p.held and p.find(job.gpus, lambda h: True) is not None for p in pools)


class _Fluid:
    """The fluid model of one pool: the clock ``t``, the GPUs ``avail`` at ``t``, and the
    GPUs that come back later, summed per release time (``at``: time -> GPUs, ``times``: a
    heap of those times). ``pending_infos`` walks it inline: a job takes its GPUs at the
    earliest time enough are back (never before ``t``) and returns them after its
    protection. Summing per time changes nothing: which of several same-time releases is
    taken first never moves the clock, so only the total at each time matters, and a heap of
    plain floats is much cheaper than one of (time, GPUs) tuples."""

    __slots__ = ("t", "avail", "times", "at", "who", "since", "since_set")

    def __init__(self, st: PassState, pool: Pool):
        now = st.now
        self.t = now
        self.avail = sum(f for f, d in zip(pool.free, pool.drained, strict=True) if not d)
        at: dict[float, int] = {}
        # time -> projects of the funded jobs releasing then: whether a waiting job may count
        # on those GPUs depends on its own project (may it preempt them?), so the walk keeps
        # in ``since`` the projects behind the GPUs available since they last ran out.
        who: dict[float, set[str]] = {}
        running = st.running
        # Without preemption (the baselines, or preemption switched off) no running job's
        # protection end is an end a waiting job can count on, unfunded work included.
        preempting = st.policy.name == "fairshare" and st.policy.preemption
        for i, jobs in enumerate(pool.jobs):
            if pool.drained[i]:
                continue
            for jid, used in jobs.items():
                job = running[jid]
                t = job.protected_until_s
                if t < now:
                    t = now
                at[t] = at.get(t, 0) + used
                if job.funded or not preempting:
                    hit = who.get(t)
                    if hit is None:
                        who[t] = {job.project}
                    else:
                        hit.add(job.project)
        self.at = at
        self.who = who
        self.since: list[str] = []  # in the order their releases were reached
        self.since_set: set[str] = set()
        self.times = list(at)
        heapq.heapify(self.times)


def _shape_facts(st: PassState, job: PendingJob, by_pool: dict, counters: dict) -> tuple:
    """What every job of one shape (cluster, GPU type, GPUs, protection terms) shares: its
    fit code, whether it would fit on held nodes, the fluid that estimates it, its
    protection, the lien it needs in each of its pools (in pool order), and the position
    counter of its cluster's queue (a one-element list shared by the cluster's shapes)."""
    pools = st.pools_for(job)
    fit = _fit_code(job, pools)
    pool = next((p for p in pools if p.fits_ever(job.gpus)), None)
    fluid: _Fluid | None = None
    if pool is not None:
        fluid = by_pool.get(id(pool))
        if fluid is None:
            fluid = by_pool[id(pool)] = _Fluid(st, pool)
    needs = tuple(st.lien(job, p) for p in pools)
    counter = counters.setdefault(job.cluster or "", [0])
    return fit, _on_held(job, pools), fluid, st.protection(job), needs, counter


def pending_infos(pass_, waiting: list[PendingJob]) -> dict[str, PendingInfo]:
    """``waiting`` comes in queue order; unfunded jobs are reported behind funded ones.

    One tight loop: this runs for every waiting job on every pass, so everything a job
    shares with others of its shape (fit, held nodes, fluid, protection, lien per pool) is
    computed once per shape and messages once per what they say. The per-job work is the
    code, the position, the fluid step (see ``_Fluid``; its state lives in locals while
    consecutive jobs share a pool) and the result. Unfunded jobs are set aside and walked
    after the ``None`` marker, so positions and estimates put them behind the others."""
    st = pass_.st
    funded_fail, holder_of = pass_.funded_fail, pass_.holder_of
    left_of = st.left  # the least balance along the chain; unknown projects have nothing left
    shape: dict = {}
    by_pool: dict[int, _Fluid] = {}
    last: list[PendingJob] = []
    counters: dict[str, list[int]] = {}  # cluster ('' for none) -> [last position]
    messages: dict = {}
    out: dict[str, PendingInfo] = {}
    no_estimate = ("Held", "ExceedsCapacity", "Drain")
    priority_message = MESSAGES["Priority"]
    setattr_, new = object.__setattr__, _new
    # the fluid of the last job's pool and its fields (read once per pool)
    fluid: Any = None
    f_t: Any = None
    f_avail: Any = None
    f_times: Any = None
    f_at: Any = None
    f_who: Any = None
    f_since: Any = None
    f_in: Any = None
    below = st.tree.strictly_below
    if st.policy.name != "fairshare" or not st.policy.preemption:
        below = _never  # nothing is preempted for a waiting job: it counts on no one
    # (fluid, project, behind) -> [since, checked, bad, bad as a tuple, project, fluid, behind]
    unknown_of: dict = {}
    memo: Any = None
    last_unknown: Any = None
    last_message: Any = None
    behind = False  # walking the unfunded jobs set aside
    for job in chain(waiting, (None,), last):
        if job is None:
            behind = True
            continue
        key = (job.cluster, job.gpu_type, job.gpus, job.min_runtime_s, job.kind,
               job.max_protection_s)  # fmt: skip
        facts = shape.get(key)
        if facts is None:
            facts = shape[key] = _shape_facts(st, job, by_pool, counters)
        code: str | None
        if behind:
            code = "Unfunded"
        elif job.held:
            code = "Held"
        elif facts[0]:
            code = facts[0]
        else:
            code = funded_fail.get(job.id)
            if code is None:  # not visited: the pass stopped early on a saturated cluster
                left = left_of(job.project)
                needs = facts[4]
                if left <= 0:
                    code = "Unfunded"
                elif len(needs) == 1:
                    code = "Priority" if left >= needs[0] else "Unfunded"
                else:
                    code = "Priority" if any(left >= n for n in needs) else "Unfunded"
            if code == "Unfunded":
                last.append(job)
                continue
            if facts[1] and code in ("Priority", "Resources") and job.id not in holder_of:
                code = "Reservation"
        counter = facts[5]
        position = counter[0] = counter[0] + 1
        held = holder_of.get(job.id) if holder_of else None
        estimate = None
        unknown: tuple = ()
        if facts[2] is not None and code not in no_estimate:  # one step of the fluid model
            if facts[2] is not fluid:
                if fluid is not None:
                    fluid.t, fluid.avail, fluid.since, fluid.since_set = f_t, f_avail, f_since, f_in
                fluid = facts[2]
                f_t, f_avail, f_times, f_at = fluid.t, fluid.avail, fluid.times, fluid.at
                f_who, f_since, f_in = fluid.who, fluid.since, fluid.since_set
            now = f_t
            if held is not None and held[1] > now:
                now = held[1]
            gpus = job.gpus
            while f_avail < gpus and f_times:
                t = heappop(f_times)
                f_avail += f_at.pop(t)
                projects = f_who.pop(t, None)
                if projects is not None:
                    for p in sorted(projects):  # sorted: the order names reach messages
                        if p not in f_in:
                            f_in.add(p)
                            f_since.append(p)
                if t > now:
                    now = t
            f_t = now
            if f_since:  # may it count on the GPUs it takes? (see the module docstring)
                # Incremental per (fluid, project): ``f_since`` only grows until it is
                # replaced (when the available GPUs run out), so only the projects added
                # since the last job of this project was checked need the rank test, and
                # the test stops at the third project it may not count on (the message
                # names three; one is enough to withhold the estimate).
                # Consecutive jobs mostly share a project: the last memo is kept in locals.
                if (
                    memo is None
                    or memo[4] != job.project
                    or memo[5] is not fluid
                    or memo[6] is not behind
                ):
                    ukey = (id(fluid), job.project, behind)
                    memo = unknown_of.get(ukey)
                    if memo is None:
                        memo = unknown_of[ukey] = [f_since, 0, [], (), job.project, fluid, behind]
                if memo[0] is not f_since:
                    memo[0], memo[1], memo[2], memo[3] = f_since, 0, [], ()
                checked, bad = memo[1], memo[2]
                if checked < len(f_since) and len(bad) < 3:
                    project = job.project
                    while checked < len(f_since) and len(bad) < 3:
                        p = f_since[checked]
                        checked += 1
                        if behind or not below(p, project):
                            bad.append(p)
                    memo[1] = checked
                    memo[3] = tuple(bad)
                unknown = memo[3]
            if f_avail >= gpus:
                f_avail -= gpus
                t = now + facts[3]
                if t in f_at:
                    f_at[t] += gpus
                else:
                    f_at[t] = gpus
                    heappush(f_times, t)
                # its own protection end is no end the jobs behind it can count on
                hit = f_who.get(t)
                if hit is None:
                    f_who[t] = {job.project}
                else:
                    hit.add(job.project)
                estimate = now
                if f_avail == 0 and f_since:
                    f_since, f_in = [], set()
            if held is not None:  # the hold's own time rests on ends it can count on
                unknown = held[2]
                estimate = None if held[1] == math.inf else held[1]
            elif unknown:
                estimate = None
        if unknown and code == "Priority":
            if unknown is not last_unknown:
                last_unknown = unknown
                last_message = messages.get(unknown)
                if last_message is None:
                    last_message = messages[unknown] = (
                        f"{priority_message} No start time is known: it waits for jobs of "
                        f"{_names(unknown)} to finish."
                    )
            message = last_message
        elif unknown and not (held is not None and code == "Resources"):
            mkey: tuple = (code, job.project, job.gpus, unknown, held is not None)
            message = messages.get(mkey)
            if message is None:
                base = priority_message if code == "Priority" else _message(code, job, pass_)
                message = messages[mkey] = (
                    f"{base} No start time is known: it waits for jobs of {_names(unknown)} "
                    "to finish."
                )
        elif code == "Priority":
            message = priority_message
        else:
            mkey = (
                code,
                job.project,
                job.gpus,
                job.user if code == "InteractiveLimit" else "",
                held is not None,
            )
            got = messages.get(mkey)
            if got is None:
                got = messages[mkey] = _message(code, job, pass_)
            message = got
        if not PLAIN:
            out[job.id] = PendingInfo(code, message, position, estimate)
            continue
        info = new(PendingInfo)  # see fast_new: the hot path inlines it
        setattr_(
            info,
            "__dict__",
            {"code": code, "message": message, "position": position, "estimated_start_s": estimate},
        )
        out[job.id] = info
    return out
