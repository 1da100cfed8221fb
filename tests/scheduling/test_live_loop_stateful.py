"""The live loop as a state machine: submit, pass, dispatch, time passing, outage start and
end, jobs finishing on the simulated backend, cancel, grant change, exception approved and
expiring, charge and reconcile, in any order hypothesis finds, with a controlled clock.

After every step the money and the promises hold:

1. the ledger equals funded occupancy: for every job, the GPU-seconds charged are its GPUs ×
   the funded seconds of each attempt (from its start to its real end, or to where its funding
   ran out, or to its last charge while it runs), and the cost is that at the price of the
   nodes it used (rounded per charged interval);
2. no open lien for a job that is not running funded;
3. no budget node below zero beyond open liens and rounding (grant − charged ≥ 0; not yet
   grant − charged − held: an extended protection approved mid-run is charged without a
   lien, the strict xfail in test_money_floor.py);
4. protected_until agrees with the contract or the active exception, from the current start;
5. right after a reconcile, the database and the backend agree on what runs (but for an
   attempt Allot stopped whose work ended and that still shows COMPLETING);
6. a grant cut below what a node has spent plus what its open liens hold is refused (with
   the field named, the grant unchanged and no audit row), and no other cut is.

The backend behaves like Slurm where it matters for money: after a job's work ends it stays
COMPLETING for a while (held nodes, reported running), so a sync can confirm it "running" past
its end. Charging goes only as far as the last sync, so only then — or on a cluster never
synced, which charges provisionally to now — is anything charged beyond a real end, and
reconcile must give it back with reversal rows. An outage alone never causes a reversal: an
invariant checks that with no COMPLETING lag no reversal happens but after a charge on a
never-synced cluster. How often each reversal path ran is counted per example and printed as
a summary line (run with -s); the examples also record hypothesis events and `target()`
scores, which steer generation towards examples that give money back when hill-climbing is
asked for (ALLOT_STATEFUL_TARGET=1; see phases()).

Locally it runs a few dozen examples; CI (ALLOT_REQUIRE_SERVICES=1, on PostgreSQL) runs
ALLOT_STATEFUL_EXAMPLES, 200 by default. The examples are the same on every run of the same
suite (derandomized, one hash seed in scripts/run-tests, and on PostgreSQL every example's ids
start at the same number); tests before this one can still change the order of rows the
database returns unordered. A failure's printed steps replay in test_live_loop_found.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import tempfile
from decimal import ROUND_HALF_UP, Decimal

import pytest
import time_machine
from django.db import connection, transaction
from hypothesis import HealthCheck, Phase, event, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from budgets import ledger
from budgets import services as budget_services
from budgets.balances import held_by_path, remaining_by_path, usage_by_path
from budgets.errors import BudgetValidationError
from budgets.models import AuditEntry, GpuType, Lien, Role, UsageEntry
from budgets.periods import BudgetPeriod
from exceptions import services as exception_services
from exceptions.errors import ExceptionError
from exceptions.models import ExceptionRequest
from exceptions.tasks import housekeeping
from scheduling import dispatch, liens, passes, settling
from scheduling.accounting import charge_running_jobs
from scheduling.backends import base as backend_base
from scheduling.backends.base import BackendError, RemoteState
from scheduling.backends.simulated import SimulatedBackend
from scheduling.discovery import register_cluster
from scheduling.models import Job, Node
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, cancel_job, set_node_drain, submit_job
from tests.budgets.factories import RoleFactory, UserFactory

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
PRICES = {"H100": Decimal("1.000"), "B200": Decimal("1.800")}
LOCAL_EXAMPLES = 25
# Per example: reversal rows written by each path, so a run shows the paths were exercised.
RUNS: list[dict[str, int]] = []
CURRENT: dict[str, int] = {}


def examples() -> int:
    if os.environ.get("ALLOT_REQUIRE_SERVICES", "") in {"1", "true", "yes"}:
        return int(os.environ.get("ALLOT_STATEFUL_EXAMPLES", "200"))
    return int(os.environ.get("ALLOT_STATEFUL_EXAMPLES", str(LOCAL_EXAMPLES)))


def phases() -> list[Phase]:
    """Generate and shrink. Hill-climbing the target() scores (Phase.target) is asked for with
    ALLOT_STATEFUL_TARGET=1: below 1,000 examples hypothesis bounds it only by ten calls an
    example, and on PostgreSQL it ran past CI's limit. NO_SHRINK=1 drops shrinking."""
    skip = {Phase.explain}
    if not os.environ.get("ALLOT_STATEFUL_TARGET"):
        skip.add(Phase.target)
    if os.environ.get("NO_SHRINK"):
        skip.add(Phase.shrink)
    return [p for p in Phase if p not in skip]


def _priced(gpu_seconds: int, price: Decimal) -> int:
    return int((Decimal(gpu_seconds) * price).to_integral_value(ROUND_HALF_UP))


class CompletingBackend(SimulatedBackend):
    """The simulated backend with Slurm's COMPLETING state: for `completing_s` after its work
    ends a job still holds its nodes and is reported running (slurm_parse maps COMPLETING so),
    with no end time; then it is reported completed with its real end."""

    completing_s = 0

    def sync(self):
        now = self.clock()
        return [
            dataclasses.replace(r, state=RemoteState.RUNNING, ended_at=None, exit_code=None)
            if r.state == RemoteState.COMPLETED and now < r.ended_at + self.completing_s
            else r
            for r in super().sync()
        ]


def _counting(name: str):
    """Wrap a ledger reversal service so each call that gave something back is counted."""
    real = getattr(ledger, name)

    def counted(*args, **kwargs):
        given = real(*args, **kwargs)
        if given and CURRENT.get("settling"):
            # An attempt Allot stopped after its real end: a cause of its own.
            CURRENT["settled"] = CURRENT.get("settled", 0) + 1
        elif given:
            CURRENT[name] = CURRENT.get(name, 0) + 1
            if name == "reverse_usage_after" and not CompletingBackend.completing_s:
                # Without a COMPLETING lag nothing was confirmed running past an end: only a
                # charge on a never-synced cluster can have gone beyond one.
                CURRENT["unexplained"] = CURRENT.get("unexplained", 0) + (
                    0 if CURRENT.get("charged_unsynced") else 1
                )
        return given

    return counted


def _settling(real):
    """Wrap settling.settle_late_end so the reversals it writes are told apart."""

    def settling(*args, **kwargs):
        CURRENT["settling"] = 1
        try:
            return real(*args, **kwargs)
        finally:
            CURRENT.pop("settling", None)

    return settling


def _counted(real, name: str):
    """Wrap an accounting service that returns what it gave back: count the calls that did."""

    def counted(*args, **kwargs):
        given = real(*args, **kwargs)
        if given:
            CURRENT[name] = CURRENT.get(name, 0) + 1
        return given

    return counted


# Where every example's ids start on PostgreSQL, whatever ran before it.
ID_BASE = 1_000_000


def _sequences() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sequencename, COALESCE(last_value, 0) FROM pg_sequences"
            " WHERE schemaname = current_schema()"
        )
        return dict(cursor.fetchall())


def _set_sequences(values: dict[str, int]) -> None:
    with connection.cursor() as cursor:
        for name, value in values.items():
            cursor.execute("SELECT setval(%s, %s, %s)", [name, max(1, value), value > 0])


def _same_ids() -> None:
    """On PostgreSQL a rolled-back example still advances the sequences, so ids (and what
    depends on them: attempt keys, ordering by key) would differ with every test run before
    this one, and CI would draw other examples than a local run. Each example's ids start at
    ID_BASE instead (its rows are rolled back, so nothing collides); the test puts the
    sequences back afterwards. SQLite rolls its counters back by itself."""
    if connection.vendor == "postgresql":
        _set_sequences(dict.fromkeys(_sequences(), ID_BASE))


def keep_sequences(request) -> None:
    """Put PostgreSQL's sequences back where they were when the test that uses LiveLoop ends
    (``_same_ids`` moves them)."""
    sequences = _sequences() if connection.vendor == "postgresql" else {}
    request.addfinalizer(lambda: _set_sequences(sequences))


class LiveLoop(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.atomic = transaction.atomic()
        self.atomic.__enter__()  # every example rolls back: a fresh organisation each time
        try:
            _same_ids()
            self._organise()
        except BaseException:  # no teardown follows a failed set-up: roll back here
            transaction.set_rollback(True)
            self.atomic.__exit__(None, None, None)
            raise

    def _organise(self):
        self.clock = time_machine.travel(T0, tick=False)
        self.traveller = self.clock.start()
        self.tmp = tempfile.mkdtemp(prefix="allot-stateful-")
        for name, factor in PRICES.items():
            GpuType.objects.update_or_create(name=name, defaults={"cost_factor": factor})
        root = budget_services.create_root(None, "Org", "org")
        budget_services.set_grant(None, root, 100)
        nlp = budget_services.create_node(None, root, "NLP", "nlp")
        budget_services.set_grant(None, nlp, 70)
        self.leaves = []
        for slug, hours in (("olmo", 40), ("tulu", 20)):
            node = budget_services.create_node(None, nlp, slug, slug)
            budget_services.set_grant(None, node, hours)
            self.leaves.append(node)
        self.nlp, self.root = nlp, root
        self.user = UserFactory(username="res")
        RoleFactory(user=self.user, role=Role.Kind.RESEARCHER, node=nlp)
        self.admin = UserFactory(username="adm")
        RoleFactory(user=self.admin, role=Role.Kind.CLUSTER_ADMIN, node=None)
        report = register_cluster(
            "mix",
            "simulated",
            {
                "nodes": "3",
                "gpus_per_node": "4",
                "gpu_types": "H100,H100,B200",
                "speed": "1",
                "state_dir": self.tmp,
            },
        )
        self.cluster = report.cluster
        self.backend = dispatch.backend_for(self.cluster)
        self.attempts: dict[tuple[int, int], dict] = {}  # (job, attempt) -> what we saw
        self.reconciled = False
        self.completing_s = 0
        CURRENT.clear()

    def teardown(self):
        try:
            self._settle_at_the_end()
            self._tally()
        finally:
            self._roll_back()

    def _settle_at_the_end(self):
        """The backend answers again and is synced once more: every attempt Allot stopped after
        its work had ended (and that the backend still remembers) is then charged to its real
        end, none left overcharged. (Past the COMPLETING lag first: until then the backend
        does not say when a job it still reports running ended.)"""
        self.backend.set_outage(False)
        self.traveller.shift(dt.timedelta(seconds=self.completing_s + 1))
        sync_cluster(self.cluster.pk)
        self._observe()
        remembered = json.loads(self.backend.path.read_text()).get("jobs", {})
        unrefunded = [
            (job_id, seen)
            for (job_id, _), seen in self.attempts.items()
            if seen.get("real_end") is not None
            and seen["key"] in remembered
            and seen["end"].timestamp() - seen["real_end"] >= 1
        ]
        CURRENT["unrefunded"] = len(unrefunded)
        assert not unrefunded, unrefunded

    def _tally(self):
        rows = UsageEntry.objects.filter(reverses__isnull=False).count()
        after, before = (
            CURRENT.get("reverse_usage_after", 0),
            CURRENT.get("reverse_usage_before", 0),
        )
        RUNS.append(
            {
                "rows": rows,
                "after": after,
                "before": before,
                "lag": self.completing_s,
                "closed_after_end": CURRENT.get("closed_after_end", 0),
                "overcharged_gpu_s": CURRENT.get("overcharged_gpu_s", 0),
                "settled": CURRENT.get("settled", 0),
                "settled_earlier": CURRENT.get("settled_earlier", 0),
                "liens_shrunk": CURRENT.get("liens_shrunk", 0),
                "unrefunded": CURRENT.get("unrefunded", 0),
            }
        )
        for name, hit in (("beyond a real end", after), ("before a confirmed start", before)):
            event(f"charges {name} reversed: {'yes' if hit else 'no'}")
        # Steer generation towards examples that give money back, each path on its own label
        # (on one sum, the cheap late-start path crowds out the end-beyond-a-sync one).
        target(float(after), label="reversals beyond a real end")
        target(float(before), label="reversals before a confirmed start")
        if CURRENT.get("closed_after_end"):
            event("an attempt closed by Allot after its real end")
        target(float(CURRENT.get("settled", 0)), label="attempts stopped after their end")
        target(float(CURRENT.get("settled_earlier", 0)), label="earlier attempts settled")
        if CURRENT.get("liens_shrunk"):
            event("a lien shrunk when its extended protection ended")

    def _roll_back(self):
        CompletingBackend.completing_s = 0
        try:
            transaction.set_rollback(True)
            self.atomic.__exit__(None, None, None)
        finally:
            self.clock.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- rules ---------------------------------------------------------------------------

    @initialize(completing_s=st.sampled_from([0, 0, 60, 240]))
    def backend_completing_lag(self, completing_s):
        """How long this example's backend reports a finished job still running (0: at once)."""
        self.completing_s = CompletingBackend.completing_s = completing_s

    def _charge(self):
        """The charging task; noted when it runs on a cluster never synced (charged to now)."""
        self.cluster.refresh_from_db()
        if self.cluster.last_sync_at is None and Job.objects.filter(state="running").exists():
            CURRENT["charged_unsynced"] = 1
        charge_running_jobs()

    def _next_end(self):
        """When the next running attempt's work really ends on the backend (epoch seconds),
        completing ones included (their end may be past); None if nothing runs or it does
        not answer."""
        return min((end for end, _ in self._ends()), default=None)

    def _ends(self) -> list[tuple[float, Job]]:
        """(real end, job) for each attempt the backend reports running, soonest first."""
        try:
            remote = [r for r in self.backend.sync() if r.state == RemoteState.RUNNING]
        except BackendError:
            return []
        ends = []
        for r in remote:
            job = Job.objects.filter(pk=r.job_id).first()
            if job is not None and job.sim_duration_s and r.started_at is not None:
                left = job.sim_duration_s - (job.run_seconds_done if job.resumable else 0)
                ends.append((r.started_at + max(1, left), job))
        return sorted(ends, key=lambda pair: pair[0])

    def _now(self) -> float:
        return dt.datetime.now(tz=dt.UTC).timestamp()

    @rule(
        leaf=st.sampled_from([0, 1, None]),
        gpus=st.sampled_from([1, 2, 4]),
        min_runtime_s=st.sampled_from([600, 3600, 4 * 3600]),
        duration_s=st.integers(min_value=300, max_value=2 * 3600),
        resumable=st.booleans(),
    )
    def submit(self, leaf, gpus, min_runtime_s, duration_s, resumable):
        project = self.leaves[leaf].slug_path if leaf is not None else ""
        submit_job(
            self.user,
            JobRequest(
                name="j",
                project=project,
                cluster="mix",
                gpus=gpus,
                min_runtime_s=min_runtime_s,
                resumable=resumable,
                sim_duration_s=duration_s,
            ),
        )
        self.reconciled = False

    @rule()
    def scheduling_pass(self):
        passes.run_pass(self.cluster.pk)
        self.reconciled = False

    @rule()
    def dispatch(self):
        """What the dispatch tasks do once the pass has committed."""
        for job in Job.objects.filter(cluster=self.cluster):
            try:
                if job.state == Job.State.RUNNING and not job.dispatched:
                    dispatch.start_on_backend(job.pk, job.attempt_key)
                elif job.state == Job.State.PREEMPTED:
                    dispatch.stop_on_backend(job.pk, job.attempt_key)
                elif job.state == Job.State.CANCELLED and job.external_id:
                    dispatch.stop_on_backend(job.pk, job.attempt_key, cancel=True)
            except BackendError:
                pass  # the task retries later; reconcile repairs what is left
        self.reconciled = False

    @rule(
        seconds=st.integers(min_value=30, max_value=50 * 60)
    )  # the backend forgets ends after 1 h
    def time_passes(self, seconds):
        self.traveller.shift(dt.timedelta(seconds=seconds))
        self.reconciled = False

    @rule(after=st.integers(min_value=0, max_value=600), charge_first=st.booleans())
    def a_job_finishes(self, after, charge_first):
        """Time runs to just past the next end on the backend (a job finishing), and the
        charging task may run before reconcile hears of it."""
        end = self._next_end()
        if end is not None:
            self.traveller.shift(dt.timedelta(seconds=max(0.0, end - self._now()) + after))
            if charge_first:
                self._charge()
            self.reconciled = False

    def _start_one(self, leaf, gpus, duration_s, *, dispatched=True, resumable=True):
        """A funded job submitted and decided by a pass (and dispatched), so the stories below
        need not wait for the random rules to line up a running job."""
        self.submit(leaf, gpus, 600, duration_s, resumable)
        self.scheduling_pass()
        if dispatched:
            self.dispatch()
        self._observe()  # every attempt is seen running before it can end

    @rule(
        after=st.integers(min_value=1, max_value=300),
        outage=st.booleans(),
        seen_completing=st.booleans(),
        leaf=st.sampled_from([0, 1]),
        gpus=st.sampled_from([1, 2, 4]),
        duration_s=st.integers(min_value=300, max_value=3600),
    )
    def an_end_lands_in_an_outage(self, after, outage, seen_completing, leaf, gpus, duration_s):
        """An outage across a job's end: the backend stops answering, a job's work ends meanwhile,
        charging keeps running; the backend answers again (the job maybe still COMPLETING), is
        synced, charged, and later reports the job finished with its real end."""
        end = self._next_end()
        if end is None:
            self._start_one(leaf, gpus, duration_s)
            end = self._next_end()
        if end is None:
            return
        if outage:
            self.backend.set_outage(True)
        self.traveller.shift(dt.timedelta(seconds=max(0.0, end - self._now()) + after))
        self._charge()  # provisional, bounded by the last sync
        if outage:
            assert sync_cluster(self.cluster.pk) is None
            self.backend.set_outage(False)
        if seen_completing:
            sync_cluster(self.cluster.pk)  # within the lag the job is confirmed "running"
            self._charge()  # ... so it is charged past its real end
        self.traveller.shift(dt.timedelta(seconds=self.completing_s + 1))
        self.reconciled = sync_cluster(self.cluster.pk) is not None  # the real end, reversed

    @rule(
        after=st.integers(min_value=0, max_value=230),
        seen_completing=st.booleans(),
        leaf=st.sampled_from([0, 1]),
        gpus=st.sampled_from([1, 2, 4]),
        duration_s=st.integers(min_value=600, max_value=3600),
    )
    def a_completing_job_preempted_and_restarted(
        self, after, seen_completing, leaf, gpus, duration_s
    ):
        """Allot preempts a job (its node drained) whose work has ended while the backend
        still shows it COMPLETING: the stop task finds it running and requeues it, and a pass
        starts it again (a new attempt, a new key) before reconcile hears the first attempt's
        real end. When it does, that attempt's charges beyond the end go back; the new
        attempt's stay. (A job that is not resumable, alone on its node: a resumable one
        whose work is done is requeued and run again, its progress counted to Allot's stop,
        which a_completed_job_ran_exactly_its_work rightly refuses; not this story's
        subject.)"""

        def ends():
            running = list(Job.objects.filter(state=Job.State.RUNNING))
            return [
                (end, job)
                for end, job in self._ends()
                if job.state == Job.State.RUNNING
                and not job.resumable
                and not any(  # alone on its node: the drain stops this job only
                    other.pk != job.pk and {n for n, _ in other.nodes} & {n for n, _ in job.nodes}
                    for other in running
                )
            ]

        if not ends():
            self._start_one(leaf, gpus, duration_s, resumable=False)
        if not ends():
            return
        end, job = ends()[0]
        at = max(end, job.protected_until.timestamp()) + after
        self.traveller.shift(dt.timedelta(seconds=max(0.0, at - self._now())))
        if seen_completing:
            sync_cluster(self.cluster.pk)  # within the lag the job is confirmed "running"
            self._observe()  # an attempt this sync closed is seen closed before any restart
            self._charge()  # ... so it is charged past its real end
        node = Node.objects.get(cluster=self.cluster, name=job.nodes[0][0])
        set_node_drain(self.admin, node.pk, True, "repair")
        self.scheduling_pass()  # preempted: its protection is over
        self.dispatch()  # the stop task: requeued
        self._observe()  # the first attempt seen closed before the next one starts
        set_node_drain(self.admin, node.pk, False)
        self.scheduling_pass()  # started again, if it still ranks first for the room
        self.dispatch()
        self._observe()
        self._charge()
        self.traveller.shift(dt.timedelta(seconds=self.completing_s + 1))
        self.reconciled = sync_cluster(self.cluster.pk) is not None  # the real end, settled

    def _start_late(self, leaf, gpus, duration_s, resumable, late_s):
        """A funded job decided by a pass while the backend does not answer and sent `late_s`
        later by its retried dispatch task, no sync in between: its start is the pass's
        decision until a sync reports the real one."""
        if late_s:
            self.backend.set_outage(True)
        self.submit(leaf, gpus, 600, duration_s, resumable)
        self.scheduling_pass()
        if late_s:
            self.dispatch()  # refused: the backend does not answer; the task retries
            self.traveller.shift(dt.timedelta(seconds=late_s))
            self.backend.set_outage(False)
        self.dispatch()
        self._observe()

    def _alone_and_ended(self, resumable, after) -> Job | None:
        """The running job (resumable or not) alone on its nodes, so a drain stops it only,
        whose work ends first; the clock moved `after` seconds past its end and its protection
        (its work has ended, it may be preempted). None if there is none, or if the backend
        would have forgotten its end (an hour after it) before the end is heard."""
        running = list(Job.objects.filter(state=Job.State.RUNNING))
        for end, job in self._ends():
            alone = not any(
                other.pk != job.pk and {n for n, _ in other.nodes} & {n for n, _ in job.nodes}
                for other in running
            )
            if job.state != Job.State.RUNNING or job.resumable != resumable or not alone:
                continue
            at = max(end, job.protected_until.timestamp()) + after
            if at + self.completing_s + 1 >= end + 3600:
                return None
            self.traveller.shift(dt.timedelta(seconds=max(0.0, at - self._now())))
            return job
        return None

    @rule(
        after=st.integers(min_value=0, max_value=230),
        late_s=st.sampled_from([0, 45, 600]),
        stop_task=st.booleans(),
        resumable=st.booleans(),
        leaf=st.sampled_from([0, 1]),
        gpus=st.sampled_from([1, 2, 4]),
        duration_s=st.integers(min_value=600, max_value=3600),
    )
    def a_completing_job_preempted_then_heard(
        self, after, late_s, stop_task, resumable, leaf, gpus, duration_s
    ):
        """Allot preempts a job (its node drained) whose work has ended while the backend
        still shows it COMPLETING, or was not asked since; the backend answers, and its end is
        heard (a sync) before any pass could start the job again. A job the backend reports
        ended on its own then ends as it says, not run again: charged, and counted as run,
        from its real start (later than the pass decided when its dispatch was sent late and
        no sync confirmed the start) to its real end. One whose attempt the backend lost is
        rightly requeued instead."""
        self.backend.set_outage(False)
        job = self._alone_and_ended(resumable, after)
        if job is None:
            self._start_late(leaf, gpus, duration_s, resumable, late_s)
            job = self._alone_and_ended(resumable, after)
        if job is None:
            return
        key = job.attempt_key
        node = Node.objects.get(cluster=self.cluster, name=job.nodes[0][0])
        set_node_drain(self.admin, node.pk, True, "repair")
        self.scheduling_pass()  # preempted: its protection is over
        if stop_task:
            self.dispatch()  # the stop task finds it "running" (COMPLETING) and requeues it
        self._observe()
        self.traveller.shift(dt.timedelta(seconds=self.completing_s + 1))
        self.reconciled = sync_cluster(self.cluster.pk) is not None  # the real end, heard
        self._observe()
        set_node_drain(self.admin, node.pk, False)
        job.refresh_from_db()
        remote = next((r for r in self.backend.sync() if r.attempt_key == key), None)
        if remote is not None and remote.state in dispatch.ENDED_ON_ITS_OWN:
            assert job.attempt_key == key and job.state in Job.TERMINAL, (job.pk, job.state)
            assert job.state != Job.State.CANCELLED, job.pk
            event("a job preempted after its work ended, closed when its end was heard")

    @rule(
        hours=st.sampled_from([5, 9]),
        lag_s=st.integers(min_value=60, max_value=3 * 3600),
        recover=st.booleans(),
        leaf=st.sampled_from([0, 1]),
        gpus=st.sampled_from([1, 2]),
    )
    def an_extension_ends_while_charging_lags(self, hours, lag_s, recover, leaf, gpus):
        """A running funded job gets an extended protection (its lien grows); the backend stops
        answering, so charging stops at the last sync; the exception ends meanwhile and the
        job falls back to its contract: its lien shrinks to what that contract still needs."""
        running = [
            job
            for job in Job.objects.filter(state=Job.State.RUNNING, funded=True).order_by("pk")
            if job.protection_source == "contract"
        ]
        if not running:
            self._start_one(leaf, gpus, 12 * 3600)
            running = list(Job.objects.filter(state=Job.State.RUNNING, funded=True))
        if not running:
            return
        job = running[0]
        try:
            request = exception_services.request_exception(
                self.user, "extended_protection", job=job, hours=str(hours), justification="x"
            )
            exception_services.approve_exception(self.admin, request.pk)
        except ExceptionError:
            return
        self.backend.set_outage(True)
        self.traveller.shift(dt.timedelta(seconds=hours * 3600 + lag_s))
        self._charge()  # no further than the last sync
        housekeeping()  # the exception ends; the job is back to its contract
        if recover:
            self.backend.set_outage(False)
            self.reconciled = sync_cluster(self.cluster.pk) is not None
        else:
            self.reconciled = False

    @rule(down=st.booleans())
    def outage(self, down):
        self.backend.set_outage(down)
        self.reconciled = False

    @rule(
        leaf=st.sampled_from([0, 1]),
        gpus=st.sampled_from([1, 2, 4]),
        delay_s=st.integers(min_value=30, max_value=600),
    )
    def a_start_confirmed_late(self, leaf, gpus, delay_s):
        """The pass decides a start whose dispatch is lost; reconcile dispatches it again
        later (as Slurm may start a job later than asked), charging runs to that sync, and
        the next sync reports the real start: what was charged before it is given back."""
        self._start_one(leaf, gpus, 7200, dispatched=False)
        self.traveller.shift(dt.timedelta(seconds=delay_s))
        sync_cluster(self.cluster.pk)
        self._charge()
        self.reconciled = sync_cluster(self.cluster.pk) is not None

    @rule()
    def charge(self):
        self._charge()

    @rule()
    def reconcile(self):
        self.reconciled = sync_cluster(self.cluster.pk) is not None

    @rule(pick=st.integers(min_value=0, max_value=50))
    def cancel(self, pick):
        live = list(Job.objects.exclude(state__in=Job.TERMINAL).order_by("pk"))
        if live:
            cancel_job(self.user, live[pick % len(live)].pk)
            self.reconciled = False

    def _committed_cents(self, node) -> int:
        """Hundredths of a GPU-hour `node`'s subtree has spent this period plus what its liens
        hold, each rounded up to the cent (what no cut may go below)."""
        period = BudgetPeriod.current()
        used = usage_by_path(period.start_at, period.end_at).get(node.path, 0)
        held = held_by_path().get(node.path, 0)
        return -(-max(used, 0) // 36) + -(-held // 36)

    def _grant(self, node) -> Decimal:
        return budget_services._in_force([node], BudgetPeriod.current())[node.pk][0]

    @rule(leaf=st.sampled_from([0, 1]), hours=st.integers(min_value=0, max_value=45))
    def grant_change(self, leaf, hours):
        """Leadership moves a grant up or down: a cut below what the project has spent plus
        what its open liens hold is refused, naming the field; anything else within the
        parent is accepted."""
        node = self.leaves[leaf]
        old, committed = self._grant(node), self._committed_cents(node)
        below = hours < old and hours * 100 < committed
        try:
            budget_services.set_grant(None, node, hours)
        except BudgetValidationError as refused:
            assert refused.field == "grant_gpu_hours"
            if below:
                assert "cannot be cut below" in refused.message, refused.message
            else:
                assert "Exceeds the grant" in refused.message, refused.message
            assert self._grant(node) == old
            return
        assert not below, (node.slug_path, hours, committed)

    @rule(
        which=st.sampled_from([0, 1, "nlp"]),
        cents_below=st.integers(min_value=1, max_value=2000),
    )
    def grant_cut_below_commitments(self, which, cents_below):
        """A cut just below what is spent and held is refused and leaves no audit row."""
        node = self.nlp if which == "nlp" else self.leaves[which]
        committed_cents = self._committed_cents(node)
        amount = Decimal(committed_cents - cents_below) / 100
        old = self._grant(node)
        if amount < 0 or amount >= old:
            return
        audits = AuditEntry.objects.count()
        try:
            budget_services.set_grant(None, node, amount)
        except BudgetValidationError as refused:
            assert refused.field == "grant_gpu_hours"
            event("grant cut below commitments refused")
        else:
            raise AssertionError(f"{node.slug_path} cut to {amount} below {committed_cents}c")
        assert self._grant(node) == old
        assert AuditEntry.objects.count() == audits

    @rule(pick=st.integers(min_value=0, max_value=50), hours=st.sampled_from([5, 9, 12]))
    def exception_approved(self, pick, hours):
        live = list(Job.objects.exclude(state__in=Job.TERMINAL).order_by("pk"))
        if not live:
            return
        job = live[pick % len(live)]
        try:
            request = exception_services.request_exception(
                self.user, "extended_protection", job=job, hours=str(hours), justification="run"
            )
            exception_services.approve_exception(self.admin, request.pk)
        except ExceptionError:
            pass  # refused (already protected that long, an open request): nothing changed

    @rule()
    def exceptions_expire(self):
        housekeeping()

    # ---- what we observe -------------------------------------------------------------------

    def _observe(self):
        """Record every attempt while it runs and once it has closed (each attempt is seen
        running at least once: nothing starts and ends within one step)."""
        types = dict(Node.objects.filter(cluster=self.cluster).values_list("name", "gpu_type"))
        current = dict(Job.objects.filter(attempt__gte=1).values_list("pk", "attempt"))
        for (job_id, attempt), seen in self.attempts.items():
            if seen.get("closed") and attempt < current.get(job_id, 0):
                # An earlier attempt may be settled after the job restarted.
                self._note_settled(Job.objects.get(pk=job_id), seen)
        for job in Job.objects.filter(attempt__gte=1):
            seen = self.attempts.setdefault((job.pk, job.attempt), {})
            if seen.get("closed"):
                self._note_settled(job, seen)
                continue
            funded = job.funded or job.funding_ended_at is not None
            if job.state == Job.State.RUNNING:
                end = job.last_charged_at or job.started_at
            else:
                end = job.ended_at
                seen["closed"] = True
                if funded and job.state != Job.State.COMPLETED:
                    seen["real_end"] = self._closed_after_real_end(job)
            if job.funding_ended_at is not None:
                end = min(end, job.funding_ended_at)
            seen.update(
                key=job.attempt_key,
                start=job.started_at,
                end=end,
                gpus=job.gpus,
                funded=funded,
                gpu_type=types[job.nodes[0][0]] if job.nodes else seen.get("gpu_type"),
                expected=job.gpus * int((end - job.started_at).total_seconds()) if funded else 0,
            )

    def _closed_after_real_end(self, job) -> float | None:
        """Count the funded attempts Allot closed itself (preempted, cancelled, lost) after
        their work had already ended on the backend: charged to Allot's close until reconcile
        or the stop task learns the real end. Returns that real end (epoch seconds), if so."""
        records = json.loads(self.backend.path.read_text()).get("jobs", {})
        record = records.get(job.attempt_key)
        if not record or record.get("duration_s") is None:
            return None
        real_end = record["started_wall"] + record["duration_s"]
        late_s = job.ended_at.timestamp() - real_end
        if late_s < 1:
            return None
        CURRENT["closed_after_end"] = CURRENT.get("closed_after_end", 0) + 1
        CURRENT["overcharged_gpu_s"] = CURRENT.get("overcharged_gpu_s", 0) + int(job.gpus * late_s)
        return real_end

    def _note_settled(self, job, seen):
        """A closed attempt's charges moved back to its real end (the timeline says when), and
        to its real start when the backend reported that only once Allot had stopped it."""
        if not seen["funded"]:
            return
        if job.attempt_key == seen["key"] and job.started_at > seen["start"]:
            seen["start"] = job.started_at
            seen["expected"] = seen["gpus"] * int((seen["end"] - seen["start"]).total_seconds())
        settled = job.events.filter(
            kind="charges_settled", at__gte=seen["start"], at__lt=seen["end"]
        ).first()
        if settled is not None:
            seen["end"] = settled.at
            seen["expected"] = seen["gpus"] * int((settled.at - seen["start"]).total_seconds())

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def ledger_equals_funded_occupancy(self):
        self._observe()
        expected: dict[int, int] = {}
        for (job_id, _), seen in self.attempts.items():
            expected[job_id] = expected.get(job_id, 0) + seen["expected"]
        charged: dict[int, int] = {}
        entries = list(UsageEntry.objects.select_related("gpu_type").order_by("pk"))
        reversal_of = {e.reverses_id: e for e in entries if e.reverses_id is not None}
        for entry in entries:
            charged[entry.job_ref] = charged.get(entry.job_ref, 0) + entry.gpu_seconds
            if entry.reverses_id is not None:
                continue
            # What a charge keeps after its reversal (if any) is what it should have been:
            # the seconds of one attempt, at the price of that attempt's nodes.
            back = reversal_of.get(entry.pk)
            kept_s = entry.gpu_seconds + (back.gpu_seconds if back else 0)
            kept_cost = entry.cost_gpu_seconds + (back.cost_gpu_seconds if back else 0)
            if not kept_s:
                assert kept_cost == 0
                continue
            [attempt] = [
                a
                for (job_id, _), a in self.attempts.items()
                if job_id == entry.job_ref
                and a["start"] < entry.interval_end
                and entry.interval_start < a["end"]
            ]
            assert entry.gpu_type.name == attempt["gpu_type"]  # priced by the nodes used
            price = PRICES[attempt["gpu_type"]]
            assert entry.cost_gpu_seconds == _priced(entry.gpu_seconds, price)
            assert kept_cost == _priced(kept_s, price)
        assert {k: v for k, v in charged.items() if v} == {k: v for k, v in expected.items() if v}

    @invariant()
    def a_completed_job_ran_exactly_its_work(self):
        for job in Job.objects.filter(state=Job.State.COMPLETED):
            ran = int((job.ended_at - job.started_at).total_seconds())
            if job.resumable:
                # A job requeued with all its work counted (an attempt lost where the backend
                # last confirmed it running, exactly at its end) runs once more for the
                # simulated backend's shortest launch, one second.
                extra = 1 if ran == 1 else 0
                assert job.run_seconds_done in {job.sim_duration_s, job.sim_duration_s + extra}
            else:
                assert ran == job.sim_duration_s  # closed at the backend's real end

    @invariant()
    def no_open_lien_for_a_job_not_running_funded(self):
        for lien in Lien.objects.filter(released_at__isnull=True):
            job = Job.objects.get(pk=lien.job_ref)
            assert job.state == Job.State.RUNNING and job.funded, (job.pk, job.state)

    @invariant()
    def no_budget_below_zero_beyond_open_liens(self):
        rows = UsageEntry.objects.count()  # half a cost-second of rounding per ledger row
        held = held_by_path()
        for path, left in remaining_by_path().items():
            assert left + held.get(path, 0) >= -rows, (path, left, held.get(path, 0))

    @invariant()
    def an_open_lien_holds_no_more_than_the_protection_still_needs(self):
        """A lien covers the protected seconds not yet charged, at the price of the job's
        nodes: it grows with an extension and shrinks back when the extension ends (within
        half a cost-second of rounding per charge row)."""
        types = dict(Node.objects.filter(cluster=self.cluster).values_list("name", "gpu_type"))
        for lien in Lien.objects.filter(released_at__isnull=True):
            job = Job.objects.get(pk=lien.job_ref)
            charged_to = max(job.last_charged_at or job.started_at, job.started_at)
            left_s = max(0, int((job.protected_until - charged_to).total_seconds()))
            needs = _priced(job.gpus * left_s, PRICES[types[job.nodes[0][0]]])
            rows = UsageEntry.objects.filter(job_ref=job.pk).count()
            held = lien.cost_gpu_seconds - lien.charged_gpu_seconds
            assert held <= needs + rows + 1, (job.pk, held, needs, job.protection_source)

    @invariant()
    def a_reversal_beyond_an_end_has_a_cause(self):
        """Charging stops at the last sync: without a backend that confirms a finished job
        running (COMPLETING), only a charge on a never-synced cluster goes past an end."""
        assert not CURRENT.get("unexplained"), CURRENT

    @invariant()
    def protection_agrees_with_contract_or_exception(self):
        for job in Job.objects.filter(state=Job.State.RUNNING):
            if not job.funded:
                if job.funding_ended_at is None:
                    assert job.protected_until <= job.started_at + dt.timedelta(seconds=1)
                continue
            active = ExceptionRequest.objects.filter(
                kind="extended_protection", job=job, state="active"
            ).first()
            contract = max(300, min(job.min_runtime_s, 8 * 3600))
            if active is not None:
                contract = max(contract, int(active.hours * 3600))
            assert job.protected_until == job.started_at + dt.timedelta(seconds=contract), (
                job.pk,
                job.protected_until,
                job.started_at,
                contract,
            )

    @invariant()
    def after_reconcile_database_and_backend_agree(self):
        if not self.reconciled:
            return
        running_db = set(
            Job.objects.filter(cluster=self.cluster, state=Job.State.RUNNING).values_list(
                "attempt_key", flat=True
            )
        )
        remote = {r.attempt_key for r in self.backend.sync() if r.state == RemoteState.RUNNING}
        # An attempt whose work has ended but that still shows COMPLETING cannot be stopped
        # (Slurm ignores a cancel then): one Allot no longer runs (cancelled, an orphan
        # cancelled by reconcile) may still show running until the lag is over.
        completing = {
            r.attempt_key
            for r in SimulatedBackend.sync(self.backend)
            if r.state == RemoteState.COMPLETED
        }
        assert running_db == remote - (completing - running_db)


def without_local_constants(request, monkeypatch) -> None:
    """Hypothesis also draws numbers it finds written in the project's own modules (its local
    constants): then a literal added anywhere in the code, or a module an earlier test
    imported, changes the examples this derandomized run draws. Without them the examples
    depend on the machine's rules and the hypothesis version alone. (An internal of
    hypothesis: where a version lacks it, its examples are drawn as that version draws them.)"""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - another hypothesis layout
        return
    if not hasattr(providers, "_get_local_constants") or not hasattr(providers, "Constants"):
        return  # pragma: no cover
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if cache is not None:  # allowed constants already combined with the local ones
        cache.cache.clear()
        request.addfinalizer(cache.cache.clear)
    monkeypatch.setattr(providers, "_get_local_constants", providers.Constants)


@pytest.mark.stateful
@pytest.mark.django_db
def test_money_and_promises_hold_through_the_live_loop(request, monkeypatch):
    # the simulated clusters keep their state in temporary folders: allow them there
    request.getfixturevalue("settings").ALLOT_CLUSTER_FILES_DIR = tempfile.gettempdir()
    # An extended protection lasts its own hours (not a week), so examples see it expire
    # while its job still runs.
    request.getfixturevalue("settings").ALLOT_EXCEPTION_PROTECTION_VALID_H = 0
    monkeypatch.setitem(backend_base._REGISTRY, "simulated", f"{__name__}.CompletingBackend")
    for name in ("reverse_usage_after", "reverse_usage_before"):
        monkeypatch.setattr(ledger, name, _counting(name))
    monkeypatch.setattr(settling, "settle_late_end", _settling(settling.settle_late_end))
    for module, name, counter in (
        (settling, "settle_earlier_attempt", "settled_earlier"),
        (liens, "shrink_protection_lien", "liens_shrunk"),
    ):
        monkeypatch.setattr(module, name, _counted(getattr(module, name), counter))
    RUNS.clear()
    keep_sequences(request)
    without_local_constants(request, monkeypatch)
    run_state_machine_as_test(
        LiveLoop,
        settings=settings(
            max_examples=examples(),
            stateful_step_count=25,
            deadline=None,
            # The same examples on every run, so a CI result is reproducible; a random search
            # for new cases with ALLOT_STATEFUL_RANDOM=1.
            derandomize=not os.environ.get("ALLOT_STATEFUL_RANDOM"),
            suppress_health_check=list(HealthCheck),
            phases=phases(),
        ),
    )
    after = sum(1 for r in RUNS if r["after"])
    before = sum(1 for r in RUNS if r["before"])
    lagged = [r for r in RUNS if r["lag"]]
    print(
        f"\nexamples: {len(RUNS)}; with a reversal: {sum(1 for r in RUNS if r['rows'])} "
        f"(beyond a real end: {after}, of which {sum(1 for r in lagged if r['after'])} of "
        f"{len(lagged)} with a COMPLETING lag; before a confirmed start: {before}); "
        f"attempts closed by Allot after their real end: "
        f"{sum(r['closed_after_end'] for r in RUNS)} in "
        f"{sum(1 for r in RUNS if r['closed_after_end'])} examples, "
        f"{sum(r['overcharged_gpu_s'] for r in RUNS)} GPU-seconds charged past it, "
        f"{sum(r['settled'] for r in RUNS)} given back, "
        f"{sum(r['settled_earlier'] for r in RUNS)} more after the job had restarted; "
        f"liens shrunk when an extension ended: {sum(r['liens_shrunk'] for r in RUNS)} in "
        f"{sum(1 for r in RUNS if r['liens_shrunk'])} examples; "
        f"left unrefunded: {sum(r['unrefunded'] for r in RUNS)}"
    )
