"""State a caller may carry from one pass to the next: the fair-share queue kept in order.

A pass is a pure function of its snapshot. A caller that runs many passes over a slowly
changing queue (the simulator: some 33,000 passes over a backlog of up to 3,000 jobs) may
hand each pass the same ``PassContext``; the pass then reads the queue order from it instead
of sorting the whole backlog again. The context holds nothing the snapshot does not say: it
is an index of the snapshot's pending jobs, brought up to date from each snapshot (jobs that
appeared are filed, jobs that left are dropped; a job is the same job while it is the same
object), so a pass with a context decides exactly what a pass without one decides
(``tests/engine/test_pass_context.py`` compares both on generated snapshots and replays).

The fair-share order is (project rank, user usage, submit time, id). Every job of one
(project, user) shares the first two, so the context keeps each such group sorted by
(submit time, id) as jobs come and go, and a pass only sorts the groups by (rank, usage):
groups that tie on both are merged by (submit time, id), as one sort of all jobs would. With
each job it keeps what the queue walk reads per job: its shape (the walk's memo key) and its
GPUs times its protected window (its lien before the cost factor), both fixed for a job
under one policy.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress, count
from operator import is_, is_not

from scheduling.engine.model import PendingJob, Policy
from scheduling.engine.pass_repeat import COMPILED, RepeatMemo, identical
from scheduling.engine.tree import UNRANKED

# Policies whose order key is fixed per job (``PassState.order_key``): kept as one list.
FLAT = ("priority", "fifo")


def shape(job: PendingJob) -> tuple | None:
    """The queue walk's memo key (``Pass.run``); None for an interactive session."""
    if job.kind == "interactive":
        return None
    return (job.project, job.cluster, job.gpu_type, job.gpus)


class Group:
    """The waiting jobs of one (project, user), in (submit time, id) order, with what a
    pass may skip them by (``Pass._skip``): each job's shape as a byte (``codes``, one code
    per shape the group holds, ``ids``), so the next job of a shape is found at C speed."""

    __slots__ = (
        "project",
        "order",
        "jobs",
        "keys",
        "bases",
        "codes",
        "ids",
        "count",
        "wide",
        "_top",
        "version",
    )

    def __init__(self, project: str) -> None:
        self.project = project
        self.order: list[tuple[float, str]] = []  # (submit, id), sorted
        self.jobs: list[PendingJob] = []
        self.keys: list[tuple | None] = []
        self.bases: list[float] = []
        self.codes = bytearray()  # codes[k] = ids[keys[k]]
        self.ids: dict[tuple | None, int] = {}  # the shapes it holds -> their codes
        self.count: dict[tuple | None, int] = {}  # how many of its jobs have each shape
        self.wide = False  # more shapes than a byte tells apart: never skipped
        self._top: float | None = None  # max(bases), until a job holding it leaves
        self.version = 0  # moves with every job filed or dropped

    def top(self) -> float:
        """The largest GPUs x protection of its jobs (0 when it has none)."""
        if self._top is None:
            self._top = max(self.bases, default=0.0)
        return self._top

    @property
    def lane(self) -> bool:
        """It holds an interactive session: never skipped."""
        return None in self.ids

    def insert(self, k: int, item: tuple, job: PendingJob, key, base: float) -> None:
        self.version += 1
        self.order.insert(k, item)
        self.jobs.insert(k, job)
        self.keys.insert(k, key)
        self.bases.insert(k, base)
        if self._top is not None and base > self._top:
            self._top = base
        code = self.ids.get(key)
        if code is None:  # the lowest code free (a shape that left gives its code back)
            used = set(self.ids.values())
            code = self.ids[key] = next(c for c in range(len(used) + 1) if c not in used)
            self.wide = self.wide or code > 255
        self.count[key] = self.count.get(key, 0) + 1
        self.codes.insert(k, code & 255)

    def delete(self, k: int) -> None:
        self.version += 1
        key = self.keys[k]
        if self.bases[k] == self._top:
            self._top = None
        del self.order[k], self.jobs[k], self.keys[k], self.bases[k], self.codes[k]
        n = self.count[key] - 1
        if n:
            self.count[key] = n
        else:
            del self.count[key], self.ids[key]
            if not self.ids:
                self.wide = False


# A stretch of the queue: its jobs, their shapes and GPUs x protection (None: computed when
# needed), and the group they all belong to (None: several, or no context)
Segment = tuple[list[PendingJob], list, list, Group | None]


class PassContext:
    def __init__(self) -> None:
        self.policy: Policy | None = None
        # the last snapshot's pending, as given: the index is of these (they stay alive)
        self.last: tuple[PendingJob, ...] = ()
        self.groups: dict[tuple[str, str], Group] = {}
        self.by_id: dict[str, tuple[PendingJob, tuple | None, float]] = {}
        # per project: how many of its filed jobs have each GPUs x protection (pass_repeat)
        self.base_count: dict[str, dict[float, int]] = {}
        self._base_sorted: dict[str, list[float]] = {}
        # one object per distinct shape (its groups look shapes up by it)
        self._shapes: dict[tuple, tuple] = {}
        # Under a baseline (priority, fifo) a job's place in the queue is fixed by the job
        # (its label, submit time, id): the whole queue is kept in that order as jobs come
        # and go (``flat_queue``), with each job's order key, shape and lien, and how many
        # jobs need each number of GPUs.
        self.flat_order: list[tuple] = []
        self.flat_jobs: list[PendingJob] = []
        self.flat_keys: list[tuple | None] = []
        self.flat_bases: list[float] = []
        self.flat_of: dict[str, tuple] = {}  # job id -> its order key
        self.flat_gpus: dict[int, int] = {}
        self.repeats = RepeatMemo()  # the last pass that decided nothing (pass_repeat.py)
        # the merged jobs of groups that tied in the last pass, with the groups' versions
        self._merged_of: dict[tuple[Group, ...], tuple[tuple[int, ...], Segment]] = {}

    def _sync(self, st) -> bool:
        """Bring the index up to the snapshot's pending jobs (False: it repeats a job id)."""
        snap = st.snap
        if snap.policy != self.policy:
            self.__init__()
            self.policy = snap.policy
        pending, last = snap.pending, self.last
        if pending is not last and (len(pending) != len(last) or not identical(pending, last)):
            self.last = ()  # until the update below is complete
            if not self._update(last, pending, st):
                return False
            self.last = pending
        return True

    def flat_queue(self, st) -> tuple[list[PendingJob], list, list[float]] | None:
        """Under a baseline: the snapshot's waiting jobs that are not held, in the policy's
        order (``PassState.order_key``, a key fixed per job), with each one's shape and
        GPUs x protection; None when the snapshot repeats a job id. The lists are the
        context's own: read them, do not change them."""
        if not self._sync(st):
            return None
        return self.flat_jobs, self.flat_keys, self.flat_bases

    def queue(self, st) -> list[Segment] | None:
        """The snapshot's waiting jobs that are not held, in fair-share order, as segments:
        each a (project, user) group's own lists (its jobs, their shapes and GPUs x
        protection: what ``PassState.queue`` and the walk compute) with the group, or, where
        groups tie on rank and usage, their jobs merged by (submit time, id), with None.
        None when the snapshot repeats a job id (the pass then sorts on its own). The lists
        are the context's own: read them, do not change them. (Nothing is copied per pass:
        a queue of 3,000 jobs in one list cost a tenth of a pass to build and free.)"""
        if not self._sync(st):
            return None
        rank_of, usage = st._rank_of, st._user_usage
        heads = sorted(
            (rank_of.get(project, UNRANKED), usage.get((project, user), 0.0), project, user)
            for (project, user), g in self.groups.items()
            if g.order
        )
        segments: list[Segment] = []
        merged_of, self._merged_of = self._merged_of, {}
        i = 0
        while i < len(heads):
            j = i + 1
            while j < len(heads) and heads[j][:2] == heads[i][:2]:
                j += 1
            if j == i + 1:
                g = self.groups[heads[i][2:]]
                segments.append((g.jobs, g.keys, g.bases, g))
            else:  # groups tied on rank and usage: one order by (submit, id) across them
                tied = tuple(self.groups[head[2:]] for head in heads[i:j])
                segments.append(self._merged(tied, merged_of))
            i = j
        return segments

    def _merged(self, tied: tuple[Group, ...], merged_of: dict) -> Segment:
        """The jobs of groups that tie, in (submit time, id) order, as one sort of all jobs
        would put them; kept from the last pass while none of the groups changed."""
        versions = tuple(g.version for g in tied)
        hit = merged_of.get(tied)
        if hit is None or hit[0] != versions:
            merged: list[tuple] = []
            for g in tied:
                merged += zip(g.order, g.jobs, g.keys, g.bases, strict=True)
            merged.sort(key=lambda m: m[0])
            segment = (
                [m[1] for m in merged],
                [m[2] for m in merged],
                [m[3] for m in merged],
                None,
            )
            hit = (versions, segment)
        self._merged_of[tied] = hit
        return hit[1]

    def _update(self, last: tuple, pending: tuple[PendingJob, ...], st) -> bool:
        """File the jobs that appeared, drop those that left (by object identity)."""
        change = _diff(last, pending)
        if change is None:  # reordered throughout: compare as sets
            seen = {id(j): j for j in last}
            now = {id(j): j for j in pending}
            left = [seen[k] for k in seen.keys() - now.keys()]
            came = [now[k] for k in now.keys() - seen.keys()]
        else:
            left, came = change
        for job in left:
            self._drop(job)
        for job in came:
            if not self._file(job, st):
                self.__init__()
                return False
        return True

    def _file(self, job: PendingJob, st) -> bool:
        if job.held:
            return True
        if job.id in self.by_id:
            return False
        g = self.groups.get((job.project, job.user))
        if g is None:
            g = self.groups[(job.project, job.user)] = Group(job.project)
        item = (job.submit_s, job.id)
        base, key = job.gpus * st.protection(job), shape(job)
        if key is not None:
            key = self._shapes.setdefault(key, key)
        self.by_id[job.id] = (job, key, base)
        g.insert(bisect_left(g.order, item), item, job, key, base)
        if self.policy.name in FLAT:
            order = self.flat_of[job.id] = st.order_key(job)
            k = bisect_left(self.flat_order, order)
            self.flat_order.insert(k, order)
            self.flat_jobs.insert(k, job)
            self.flat_keys.insert(k, key)
            self.flat_bases.insert(k, base)
            self.flat_gpus[job.gpus] = self.flat_gpus.get(job.gpus, 0) + 1
        if job.project:
            tally = self.base_count.setdefault(job.project, {})
            n = tally.get(base, 0)
            tally[base] = n + 1
            if not n:
                self._base_sorted.pop(job.project, None)
        return True

    def _drop(self, job: PendingJob) -> None:
        if job.held:
            return
        g = self.groups[(job.project, job.user)]
        g.delete(bisect_left(g.order, (job.submit_s, job.id)))
        base = self.by_id.pop(job.id)[2]
        if self.policy.name in FLAT:
            k = bisect_left(self.flat_order, self.flat_of.pop(job.id))
            del self.flat_order[k], self.flat_jobs[k], self.flat_keys[k], self.flat_bases[k]
            n = self.flat_gpus[job.gpus] - 1
            if n:
                self.flat_gpus[job.gpus] = n
            else:
                del self.flat_gpus[job.gpus]
        if job.project:
            tally = self.base_count[job.project]
            n = tally[base] - 1
            if n:
                tally[base] = n
            else:
                del tally[base]
                self._base_sorted.pop(job.project, None)

    def bases(self) -> dict[str, list[float]]:
        """Per project with filed jobs, their distinct GPUs x protection, ascending."""
        out, done = {}, self._base_sorted
        for project, tally in self.base_count.items():
            if tally:
                hit = done.get(project)
                if hit is None:
                    hit = done[project] = sorted(tally)
                out[project] = hit
        return out


MAX_GAPS = 64  # beyond this many mismatches, a set difference is cheaper


def _diff(old: tuple, new: tuple) -> tuple[list, list] | None:
    """(objects of ``old`` not in ``new``, objects of ``new`` not in ``old``), by identity,
    for two sequences of distinct objects; None past ``MAX_GAPS`` mismatches.

    A queue between two passes mostly keeps its order: a few jobs leave from anywhere, new
    ones arrive at the end. So walk both in step, comparing runs at C speed: at a mismatch
    the old object is taken as gone; what remains of ``new`` at the end arrived. An object
    taken as gone that is among the arrivals only moved, and is neither. (An object of
    ``new`` matched in step is in ``old``; so every object of ``old`` not matched in step
    is either absent from ``new`` or among its remaining tail, and the result is exact.)
    Each run is compared in windows that double (``_same_for``), so the whole walk reads
    each object about once, however many gaps it meets."""
    i = j = gaps = 0
    left: list = []
    while True:
        k = _same_for(old, new, i, j)
        if k is None:
            n = min(len(old) - i, len(new) - j)
            i, j = i + n, j + n
            break
        gaps += 1
        if gaps > MAX_GAPS:
            return None
        left.append(old[i + k])
        i, j = i + k + 1, j + k
    left += old[i:]
    came = list(new[j:])
    if left and came:
        moved = {id(x) for x in left} & {id(x) for x in came}
        if moved:
            left = [x for x in left if id(x) not in moved]
            came = [x for x in came if id(x) not in moved]
    return left, came


def _same_for(old: tuple, new: tuple, i: int, j: int) -> int | None:
    """The first k at which ``old[i + k]`` is not ``new[j + k]`` (None if the shorter of
    the two tails holds no such k), comparing windows of 64, 128, ... objects at C speed
    instead of both whole tails (copying them once per gap cost O(gaps x queue))."""
    if COMPILED:  # (see pass_repeat.COMPILED)
        for k in range(min(len(old) - i, len(new) - j)):
            if old[i + k] is not new[j + k]:
                return k
        return None
    done, width = 0, 64
    while True:
        a, b = old[i + done : i + done + width], new[j + done : j + done + width]
        if not all(map(is_, a, b)):  # (cheaper than counting along every run)
            return done + next(compress(count(), map(is_not, a, b)))
        if len(a) < width or len(b) < width:
            return None
        done += width
        width *= 2
