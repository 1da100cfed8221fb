"""The demo shows the runtime contract: on the demo's one clock, a maintenance drain
starts on a busy jupiter node, empties once its jobs' protections end, and the node is put back
after standing empty; funded work preempted after its protection is counted."""

import datetime as dt

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from scheduling import demo
from scheduling.models import Cluster, JobEvent, Node
from scheduling.reports import operations_report

pytestmark = pytest.mark.django_db


def test_the_demo_drains_a_busy_node_which_empties_after_protection_and_comes_back(
    tmp_path, monkeypatch, run_pass, settings
):
    settings.DEBUG = True  # as make demo runs it: seed_demo refuses to run without DEBUG
    monkeypatch.setenv("ALLOT_VAR_DIR", str(tmp_path))
    call_command("seed_demo")
    jupiter = Cluster.objects.get(name="jupiter")
    assert jupiter.options["speed"] == "1"  # one clock: protection and work count alike
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        run_pass(jupiter)
        assert "draining" in demo.maintain(now=timezone.now())
        node = Node.objects.get(cluster=jupiter, drained=True)
        assert demo.maintain(now=timezone.now()) == ""  # one drain at a time
        clock.shift(dt.timedelta(minutes=11))  # every demo protection (≤ 10 min) has ended
        run_pass(jupiter)
        ops = {c.cluster.name: c for c in operations_report()["clusters"]}["jupiter"]
        assert ops.drain_preemptions_24h >= 1 and ops.drained_empty == 1
        assert JobEvent.objects.filter(kind="preempted", message__contains=node.name).exists()
        clock.shift(dt.timedelta(minutes=5))
        done = demo.maintain(now=timezone.now())
        assert f"{node.name} repaired" in done
        node.refresh_from_db()
        assert not node.drained or node.drain_requested_at > start + dt.timedelta(minutes=15)
