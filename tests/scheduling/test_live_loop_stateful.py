"""The live loop as a state machine: submit, pass, dispatch, time passing, outage start and
end, jobs finishing on the simulated backend, cancel, grant change, exception approved and
expiring, charge and reconcile, in any order hypothesis finds, with a controlled clock.

After every step the money and the promises hold:

1. the ledger equals funded occupancy: for every job, the GPU-seconds charged are its GPUs ×
   the funded seconds of each attempt (from its start to its real end, or to where its funding
   ran out, or to its last charge while it runs), and the cost is that at the price of the
   nodes it used (rounded per charged interval);
2. no open lien for a job that is not running funded;
3. no budget node below zero beyond rounding (grant − charged − held);
4. protected_until agrees with the contract or the active exception, from the current start;
5. right after a reconcile, the database and the backend agree on what runs.

Locally it runs a few dozen examples; CI (ALLOT_REQUIRE_SERVICES=1, on PostgreSQL) runs
ALLOT_STATEFUL_EXAMPLES, 200 by default.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from decimal import ROUND_HALF_UP, Decimal

import pytest
import time_machine
from django.db import transaction
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from budgets import services as budget_services
from budgets.balances import held_by_path, remaining_by_path, usage_by_path
from budgets.errors import BudgetError
from budgets.models import GpuType, Lien, Role, UsageEntry
from budgets.periods import BudgetPeriod
from exceptions import services as exception_services
from exceptions.errors import ExceptionError
from exceptions.models import ExceptionRequest
from exceptions.tasks import housekeeping
from scheduling import dispatch, passes
from scheduling.accounting import charge_running_jobs
from scheduling.backends.base import BackendError, RemoteState
from scheduling.discovery import register_cluster
from scheduling.models import Job, Node
from scheduling.reconcile import sync_cluster
from scheduling.services import JobRequest, cancel_job, submit_job
from tests.budgets.factories import RoleFactory, UserFactory

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
PRICES = {"H100": Decimal("1.000"), "B200": Decimal("1.800")}
LOCAL_EXAMPLES = 25
REVERSALS: list[int] = []  # reversal rows per example, so a run shows the path was exercised


def examples() -> int:
    if os.environ.get("ALLOT_REQUIRE_SERVICES", "") in {"1", "true", "yes"}:
        return int(os.environ.get("ALLOT_STATEFUL_EXAMPLES", "200"))
    return int(os.environ.get("ALLOT_STATEFUL_EXAMPLES", str(LOCAL_EXAMPLES)))


class LiveLoop(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.atomic = transaction.atomic()
        self.atomic.__enter__()  # every example rolls back: a fresh organisation each time
        try:
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

    def teardown(self):
        REVERSALS.append(UsageEntry.objects.filter(reverses__isnull=False).count())
        try:
            transaction.set_rollback(True)
            self.atomic.__exit__(None, None, None)
        finally:
            self.clock.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- rules ---------------------------------------------------------------------------

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
        try:
            remote = [r for r in self.backend.sync() if r.state == RemoteState.RUNNING]
        except BackendError:
            return
        ends = []
        for r in remote:
            job = Job.objects.filter(pk=r.job_id).first()
            if job is not None and job.sim_duration_s and r.started_at is not None:
                left = job.sim_duration_s - (job.run_seconds_done if job.resumable else 0)
                ends.append(r.started_at + max(1, left))
        if ends:
            now = dt.datetime.now(tz=dt.UTC).timestamp()
            self.traveller.shift(dt.timedelta(seconds=max(0.0, min(ends) - now) + after))
            if charge_first:
                charge_running_jobs()
            self.reconciled = False

    @rule(down=st.booleans())
    def outage(self, down):
        self.backend.set_outage(down)
        self.reconciled = False

    @rule()
    def charge(self):
        charge_running_jobs()

    @rule()
    def reconcile(self):
        self.reconciled = sync_cluster(self.cluster.pk) is not None

    @rule(pick=st.integers(min_value=0, max_value=50))
    def cancel(self, pick):
        live = list(Job.objects.exclude(state__in=Job.TERMINAL).order_by("pk"))
        if live:
            cancel_job(self.user, live[pick % len(live)].pk)
            self.reconciled = False

    @rule(leaf=st.sampled_from([0, 1]), hours=st.integers(min_value=0, max_value=45))
    def grant_change(self, leaf, hours):
        """Leadership moves a grant, up or down, but not below what was already spent (no
        grant takes back a GPU-hour that ran); it may go below what open liens hold."""
        node = self.leaves[leaf]
        period = BudgetPeriod.current()
        spent = usage_by_path(period.start_at, period.end_at).get(node.path, 0)
        try:
            budget_services.set_grant(None, node, max(hours, -(-spent // 3600)))
        except BudgetError:
            pass  # refused (beyond the parent): nothing changed

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
        for job in Job.objects.filter(attempt__gte=1):
            seen = self.attempts.setdefault((job.pk, job.attempt), {})
            if seen.get("closed"):
                continue
            funded = job.funded or job.funding_ended_at is not None
            if job.state == Job.State.RUNNING:
                end = job.last_charged_at or job.started_at
            else:
                end = job.ended_at
                seen["closed"] = True
            if job.funding_ended_at is not None:
                end = min(end, job.funding_ended_at)
            seen.update(
                start=job.started_at,
                end=end,
                gpus=job.gpus,
                funded=funded,
                gpu_type=types[job.nodes[0][0]] if job.nodes else seen.get("gpu_type"),
                expected=job.gpus * int((end - job.started_at).total_seconds()) if funded else 0,
            )

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def ledger_equals_funded_occupancy(self):
        self._observe()
        expected: dict[int, int] = {}
        for (job_id, _), seen in self.attempts.items():
            expected[job_id] = expected.get(job_id, 0) + seen["expected"]
        charged: dict[int, int] = {}
        for entry in UsageEntry.objects.select_related("gpu_type"):
            charged[entry.job_ref] = charged.get(entry.job_ref, 0) + entry.gpu_seconds
            if entry.reverses_id is not None:
                continue
            [attempt] = [
                a
                for (job_id, _), a in self.attempts.items()
                if job_id == entry.job_ref and a["start"] <= entry.interval_start < a["end"]
            ]
            assert entry.gpu_type.name == attempt["gpu_type"]  # priced by the nodes used
            price = PRICES[attempt["gpu_type"]]
            want = (Decimal(entry.gpu_seconds) * price).to_integral_value(ROUND_HALF_UP)
            assert entry.cost_gpu_seconds == want
        assert {k: v for k, v in charged.items() if v} == {k: v for k, v in expected.items() if v}

    @invariant()
    def a_completed_job_ran_exactly_its_work(self):
        for job in Job.objects.filter(state=Job.State.COMPLETED):
            ran = int((job.ended_at - job.started_at).total_seconds())
            if job.resumable:
                assert job.run_seconds_done == job.sim_duration_s
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
        assert running_db == remote


@pytest.mark.stateful
@pytest.mark.django_db
def test_money_and_promises_hold_through_the_live_loop(request):
    # the simulated clusters keep their state in temporary folders: allow them there
    request.getfixturevalue("settings").ALLOT_CLUSTER_FILES_DIR = tempfile.gettempdir()
    run_state_machine_as_test(
        LiveLoop,
        settings=settings(
            max_examples=examples(),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=[p for p in Phase if p != Phase.shrink or not os.environ.get("NO_SHRINK")],
        ),
    )
    print(f"examples: {len(REVERSALS)}, with reversals: {sum(1 for n in REVERSALS if n)}")
