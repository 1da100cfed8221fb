"""Examples the live-loop state machine (test_live_loop_stateful.py) found, replayed step by
step with every invariant checked after each step, so each stays fixed whatever examples the
machine draws next (new rules, or a change in what a rule does, change what it draws)."""

import tempfile

import pytest

from scheduling.backends import base as backend_base
from tests.scheduling import test_live_loop_stateful as machine

INVARIANTS = (
    "a_completed_job_ran_exactly_its_work",
    "after_reconcile_database_and_backend_agree",
    "an_open_lien_holds_no_more_than_the_protection_still_needs",
    "ledger_equals_funded_occupancy",
    "no_budget_below_zero_beyond_open_liens",
    "no_open_lien_for_a_job_not_running_funded",
    "protection_agrees_with_contract_or_exception",
)
RESTART = "a_completing_job_preempted_and_restarted"
OUTAGE_END = "an_end_lands_in_an_outage"

# Jobs decided during an outage and never dispatched were charged until their funding ran
# out; the backend started them hours later: those charges stood for time they never ran
# (confirm_start gave back charges before a real start only while the job was still funded).
DEFUNDED_BEFORE_ITS_REAL_START = [
    ("backend_completing_lag", dict(completing_s=240)),
    (
        OUTAGE_END,
        dict(after=207, duration_s=1013, gpus=2, leaf=1, outage=True, seen_completing=True),
    ),
    (RESTART, dict(after=127, duration_s=2933, gpus=4, leaf=0, seen_completing=True)),
    (
        OUTAGE_END,
        dict(after=186, duration_s=407, gpus=4, leaf=1, outage=False, seen_completing=False),
    ),
    ("grant_cut_below_commitments", dict(cents_below=850, which=0)),
    ("outage", dict(down=True)),
    (RESTART, dict(after=48, duration_s=861, gpus=1, leaf=1, seen_completing=True)),
    ("submit", dict(duration_s=2281, gpus=4, leaf=1, min_runtime_s=600, resumable=False)),
    ("grant_cut_below_commitments", dict(cents_below=42, which="nlp")),
    (RESTART, dict(after=130, duration_s=1240, gpus=2, leaf=1, seen_completing=True)),
    (RESTART, dict(after=11, duration_s=1863, gpus=2, leaf=1, seen_completing=False)),
    (
        "an_extension_ends_while_charging_lags",
        dict(gpus=1, hours=9, lag_s=317, leaf=0, recover=True),
    ),
    ("exceptions_expire", {}),
    (RESTART, dict(after=180, duration_s=1566, gpus=2, leaf=1, seen_completing=False)),
]

# A sync inside one rule lost two attempts and the same rule's pass restarted them: the
# machine's record must see an attempt closed before its job starts again.
LOST_AND_RESTARTED_IN_ONE_STEP = [
    ("backend_completing_lag", dict(completing_s=0)),
    ("charge", {}),
    (RESTART, dict(after=155, duration_s=3369, gpus=1, leaf=0, seen_completing=True)),
    ("a_start_confirmed_late", dict(delay_s=363, gpus=1, leaf=0)),
    ("charge", {}),
    ("scheduling_pass", {}),
    ("charge", {}),
    ("a_job_finishes", dict(after=526, charge_first=True)),
    ("charge", {}),
    ("cancel", dict(pick=28)),
    ("charge", {}),
    ("submit", dict(duration_s=1546, gpus=1, leaf=1, min_runtime_s=600, resumable=False)),
    ("exception_approved", dict(hours=12, pick=31)),
    ("charge", {}),
    (RESTART, dict(after=191, duration_s=600, gpus=1, leaf=0, seen_completing=False)),
    ("exception_approved", dict(hours=5, pick=29)),
    (RESTART, dict(after=0, duration_s=600, gpus=1, leaf=0, seen_completing=True)),
]

EXTENDED_THEN_PREEMPTED_WHILE_COMPLETING = [
    ("backend_completing_lag", dict(completing_s=240)),
    (RESTART, dict(after=168, duration_s=1626, gpus=1, leaf=0, seen_completing=True)),
    ("exception_approved", dict(hours=9, pick=21)),
    (RESTART, dict(after=70, duration_s=2784, gpus=1, leaf=1, seen_completing=True)),
]

# Decided during an outage, never dispatched, given an extended protection and charged on a
# cluster never synced; the extension ends, the backend answers and starts the job late.
EXTENDED_BEFORE_ITS_REAL_START = [
    ("backend_completing_lag", dict(completing_s=0)),
    ("outage", dict(down=True)),
    (
        "an_extension_ends_while_charging_lags",
        dict(gpus=1, hours=5, lag_s=60, leaf=0, recover=True),
    ),
    ("reconcile", {}),
]

# A resumable job's attempt lost during an outage on a cluster never synced counted its
# progress to the moment Allot noticed (5 h for 5 min of work), so its restart ran 1 s; it now
# keeps no progress from an attempt the backend never confirmed. (Lost attempts on a synced
# cluster count to the last sync: test_backend_outage.py.)
LOST_ON_A_CLUSTER_NEVER_SYNCED = [
    ("backend_completing_lag", dict(completing_s=0)),
    ("submit", dict(duration_s=300, gpus=1, leaf=0, min_runtime_s=600, resumable=True)),
    ("a_job_finishes", dict(after=0, charge_first=False)),
    ("charge", {}),
    (
        "an_extension_ends_while_charging_lags",
        dict(gpus=1, hours=5, lag_s=60, leaf=0, recover=False),
    ),
    ("outage", dict(down=False)),
    ("a_start_confirmed_late", dict(delay_s=30, gpus=1, leaf=0)),
    (RESTART, dict(after=0, duration_s=600, gpus=2, leaf=0, seen_completing=False)),
]


CHARGED_PAST_A_REAL_END_NEVER_SYNCED = [
    ("backend_completing_lag", dict(completing_s=0)),
    ("submit", dict(duration_s=300, gpus=1, leaf=0, min_runtime_s=600, resumable=True)),
    ("dispatch", {}),
    *[("charge", {})] * 9,
    ("dispatch", {}),
    ("submit", dict(duration_s=630, gpus=1, leaf=None, min_runtime_s=14400, resumable=True)),
    ("grant_cut_below_commitments", dict(cents_below=188, which=1)),
    ("scheduling_pass", {}),
    ("time_passes", dict(seconds=1975)),
    ("charge", {}),
    ("submit", dict(duration_s=2000, gpus=1, leaf=0, min_runtime_s=14400, resumable=False)),
    ("time_passes", dict(seconds=252)),
    ("dispatch", {}),
    (RESTART, dict(after=3, duration_s=3328, gpus=2, leaf=0, seen_completing=False)),
]


# Found with the state machine's rules as they are (in a local run that drew other examples
# than CI); not fixed yet, so a strict xfail: a resumable 2-hour job is confirmed running by the
# sync that ends a 5-hour outage, then lost in the next outage; closed at that sync, it counts
# 5 h of progress and its restart runs 1 s.
PROGRESS_THROUGH_TWO_EXTENSIONS = [
    ("backend_completing_lag", dict(completing_s=0)),
    ("outage", dict(down=True)),
    ("a_start_confirmed_late", dict(delay_s=30, gpus=1, leaf=1)),
    ("a_start_confirmed_late", dict(delay_s=30, gpus=1, leaf=0)),
    ("submit", dict(duration_s=300, gpus=2, leaf=0, min_runtime_s=600, resumable=False)),
    ("scheduling_pass", {}),
    ("dispatch", {}),
    (
        "an_extension_ends_while_charging_lags",
        dict(gpus=1, hours=5, lag_s=60, leaf=0, recover=True),
    ),
    (
        "an_extension_ends_while_charging_lags",
        dict(gpus=1, hours=5, lag_s=60, leaf=0, recover=True),
    ),
    (RESTART, dict(after=0, duration_s=600, gpus=1, leaf=0, seen_completing=False)),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "steps",
    [
        DEFUNDED_BEFORE_ITS_REAL_START,
        LOST_AND_RESTARTED_IN_ONE_STEP,
        EXTENDED_THEN_PREEMPTED_WHILE_COMPLETING,
        EXTENDED_BEFORE_ITS_REAL_START,
        LOST_ON_A_CLUSTER_NEVER_SYNCED,
        CHARGED_PAST_A_REAL_END_NEVER_SYNCED,
        pytest.param(
            PROGRESS_THROUGH_TWO_EXTENSIONS,
            marks=pytest.mark.xfail(
                strict=True, reason="a lost attempt counts progress the backend confirmed"
            ),
        ),
    ],
    ids=[
        "defunded-before-start",
        "lost-and-restarted",
        "extended-then-preempted",
        "extended-before-start",
        "lost-never-synced",
        "charged-past-end-never-synced",
        "progress-through-two-extensions",
    ],
)
def test_a_found_example_holds_every_invariant(request, monkeypatch, steps):
    settings = request.getfixturevalue("settings")
    settings.ALLOT_CLUSTER_FILES_DIR = tempfile.gettempdir()
    settings.ALLOT_EXCEPTION_PROTECTION_VALID_H = 0
    monkeypatch.setitem(
        backend_base._REGISTRY, "simulated", f"{machine.__name__}.CompletingBackend"
    )
    for name in ("event", "target"):  # hypothesis' statistics: only inside a hypothesis test
        monkeypatch.setattr(machine, name, lambda *args, **kwargs: None)
    machine.keep_sequences(request)
    loop = machine.LiveLoop()
    try:
        for rule, arguments in steps:
            getattr(loop, rule)(**arguments)
            for invariant in INVARIANTS:
                getattr(loop, invariant)()
        loop._settle_at_the_end()
    finally:
        loop._roll_back()
