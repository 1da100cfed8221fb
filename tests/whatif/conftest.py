"""A small recorded workload on the personas' tree: olmo and tulu each queue thirty 2-hour
2-GPU jobs on a 16-GPU simulated cluster at T0; the records are read six hours later."""

import datetime as dt
from types import SimpleNamespace

import pytest
import time_machine

from budgets.models import Role
from scheduling.services import JobRequest, submit_job
from tests.budgets.factories import RoleFactory, UserFactory
from tests.scheduling.conftest import make_cluster

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
AS_OF = T0 + dt.timedelta(hours=6)
JOBS_EACH = 30


@pytest.fixture
def recorded(budget_tree, researcher, tmp_path):
    cluster = make_cluster(tmp_path, nodes=2, gpus=8)
    tulu_person = UserFactory(username="tulu-person")
    RoleFactory(user=tulu_person, role=Role.Kind.RESEARCHER, node=budget_tree.tulu)
    with time_machine.travel(T0, tick=False) as clock:
        for i in range(JOBS_EACH):
            for who, project in ((researcher, "nlp/olmo"), (tulu_person, "nlp/tulu")):
                clock.shift(1)
                submit_job(
                    who,
                    JobRequest(
                        name=f"{project}-{i}",
                        project=project,
                        cluster=cluster.name,
                        gpus=2,
                        min_runtime_s=600,
                        sim_duration_s=2 * 3600,
                    ),
                )
    return SimpleNamespace(cluster=cluster, tree=budget_tree)


@pytest.fixture
def at_as_of():
    with time_machine.travel(AS_OF, tick=False):
        yield AS_OF
