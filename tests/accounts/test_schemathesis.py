"""Schemathesis against a live server, as every role (and as nobody): no input, valid or not,
may answer 5xx.

Every operation of the OpenAPI schema gets a bounded number of generated requests (positive
and negative data, and real ids for half of the path parameters so requests get past the
404: ``ALLOT_SCHEMATHESIS_EXAMPLES`` per operation, 15 by default), sent over
HTTP to pytest-django's live server with the persona's API token. Shrinking is skipped so the
run stays within a couple of minutes; a failure lists every operation that answered 5xx with
a curl command to reproduce it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
import schemathesis
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from exceptions import services as exception_services
from portal.celery import app as celery_app
from portal.tokens import issue_token
from scheduling.models import Job
from tests.scheduling.conftest import make_cluster

pytestmark = [pytest.mark.schemathesis, pytest.mark.django_db(transaction=True)]
EXAMPLES = int(os.environ.get("ALLOT_SCHEMATHESIS_EXAMPLES", "15"))


@dataclass
class Tally:
    operations: int = 0
    examples: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def organisation(personas, budget_tree, tmp_path):
    """Something for every endpoint to find: a cluster, jobs, a pending exception."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    cluster = make_cluster(tmp_path, name="jupiter")
    for owner, project in ((personas["researcher"], budget_tree.olmo), (personas["leader"], None)):
        Job.objects.create(
            name="train",
            owner=owner,
            project=project,
            cluster=cluster,
            gpus=1,
            min_runtime_s=3600,
            command="python train.py",
            submitted_at=timezone.now(),
        )
    exception_services.request_exception(
        personas["researcher"],
        "budget_topup",
        node=budget_tree.olmo.pk,
        gpu_hours="10",
        justification="a deadline",
    )
    yield personas
    celery_app.conf.task_always_eager = previous


def _schema():
    from drf_spectacular.generators import SchemaGenerator

    return schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))


def _real_ids(operation) -> list[dict]:
    """Path parameters naming objects that exist, for the operation's resource."""
    from budgets.models import BudgetNode
    from exceptions.models import ExceptionRequest
    from scheduling.models import Cluster, Node

    if "{id}" not in operation.path:
        return []
    resource = operation.path.split("/api/v1/", 1)[1].split("/", 1)[0]
    model = {
        "budgets": BudgetNode,
        "jobs": Job,
        "exceptions": ExceptionRequest,
        "clusters": Cluster,
    }.get(resource)
    if model is None:
        return []
    ids = list(model.objects.values_list("pk", flat=True)[:8])
    if "{node_id}" in operation.path:
        nodes = list(Node.objects.values_list("pk", flat=True)[:2])
        return [{"id": str(i), "node_id": str(n)} for i in ids for n in nodes]
    return [{"id": str(i)} for i in ids]


def _strategy(operation):
    generated = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        try:
            generated.append(operation.as_strategy(generation_mode=mode))
        except Exception:  # some operations have nothing to make invalid
            continue
    real = [
        operation.as_strategy(generation_mode=mode, path_parameters=params)
        for params in _real_ids(operation)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    ]
    return st.one_of(st.one_of(generated), st.one_of(real)) if real else st.one_of(generated)


def _fuzz(operation, base_url, headers, tally: Tally) -> None:
    @given(case=_strategy(operation))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case):
        response = case.call(base_url=base_url, headers=headers, timeout=60)
        tally.examples += 1
        tally.statuses[response.status_code] = tally.statuses.get(response.status_code, 0) + 1
        if response.status_code >= 500:
            tally.errors.append(
                f"{operation.label} → {response.status_code}\n"
                f"  {case.as_curl_command(headers=headers)}\n  {response.text[:300]}"
            )

    run()


ROLES = ["researcher", "project_lead", "manager", "leader", "cluster_admin", "outsider", "nobody"]


@pytest.mark.parametrize("role", ROLES)
def test_the_api_never_answers_a_server_error(live_server, organisation, role, capsys):
    headers = {}
    if role != "nobody":
        _, token = issue_token(organisation[role])
        headers = {"Authorization": f"Token {token}"}
    tally = Tally()
    for result in _schema().get_all_operations():
        operation = result.ok()
        tally.operations += 1
        _fuzz(operation, live_server.url, headers, tally)
    with capsys.disabled():
        statuses = sorted(tally.statuses.items())
        print(
            f"\nschemathesis as {role}: {tally.operations} operations, {tally.examples} "
            f"requests, {len(tally.errors)} server errors; statuses {statuses}"
        )
    assert not tally.errors, "\n".join(tally.errors[:20])
