"""Two approvers press approve at the same moment, on PostgreSQL where the row lock is real."""

import threading

import pytest
from django.db import connection, connections

from exceptions import services
from exceptions.models import ExceptionRequest
from scheduling.models import JobEvent
from tests.conftest import service_missing

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_approvers_at_once_apply_the_effect_once(protection, job, cluster_admin, leader):
    if connection.vendor != "postgresql":
        service_missing("a real row-lock race needs PostgreSQL")
    request = protection()
    barrier = threading.Barrier(2)
    outcomes = []

    def approve(user):
        barrier.wait()
        try:
            services.approve_exception(user, request.pk)
            outcomes.append("approved")
        except Exception as exc:  # the loser is refused, whatever the exact error class
            outcomes.append(type(exc).__name__)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approve, args=(u,)) for u in (cluster_admin, leader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["InvalidTransition", "approved"]
    assert JobEvent.objects.filter(job=job, kind="protection").count() == 1
    request = ExceptionRequest.objects.get(pk=request.pk)
    assert request.approvals.count() == 1
