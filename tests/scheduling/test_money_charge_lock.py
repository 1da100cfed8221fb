"""A charging run and a pass spend the same balance: the run reads it under the budget-chain
lock the pass takes to hold a lien, so the two cannot both spend the last hours."""

import datetime as dt
import threading
import time

import pytest
import time_machine
from django.db import connection, transaction

from budgets import ledger
from budgets import services as budget_services
from budgets.balances import remaining_by_path
from scheduling import passes
from scheduling.accounting import charge_running_jobs
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.scheduling.conftest import make_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


def test_a_charge_waits_for_a_pass_holding_the_chain_and_then_spends_only_what_is_left(
    researcher, budget_tree, tmp_path
):
    if connection.vendor != "postgresql":
        pytest.skip("row locks between two connections: needs PostgreSQL")
    cluster = make_cluster(tmp_path)
    with time_machine.travel(T0, tick=False) as clock:
        budget_services.set_grant(None, budget_tree.olmo, 4)  # 1 h protected + 1 h at 2 GPUs
        job = submit_job(
            researcher,
            JobRequest(name="t", project="nlp/olmo", cluster="jupiter", gpus=2, min_runtime_s=3600),
        )
        passes.run_pass(cluster.pk)
        job.refresh_from_db()
        assert job.state == Job.State.RUNNING and job.funded
        clock.shift(dt.timedelta(hours=3))
        held, release = threading.Event(), threading.Event()

        def another_pass_holds_the_last_hours():
            try:
                with transaction.atomic():
                    ledger.hold_lien(budget_tree.olmo, 10**6, 2 * 3600)  # the chain is locked
                    held.set()
                    release.wait(30)
                    time.sleep(0.5)
            finally:
                connection.close()

        other = threading.Thread(target=another_pass_holds_the_last_hours)
        other.start()
        assert held.wait(30)
        release.set()
        charge_running_jobs()
        other.join(30)
    assert remaining_by_path()[budget_tree.olmo.path] >= 0
