"""deploy/grafana/allot-dashboard.json: valid JSON for Grafana whose queries name only series
/metrics serves (a renamed metric breaks this test, not an operator's dashboard)."""

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "allot-dashboard.json"
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",), "gauge": ("",)}


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries


def served_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


@pytest.mark.django_db
def test_every_dashboard_query_names_only_metrics_that_metrics_serves(client):
    served = served_names(client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())
    queries = dashboard_queries()
    named = {name for query in queries for name in re.findall(r"\ballot_\w+", query)}
    assert len(queries) >= 20
    assert named - served == set()
    # and the contract's series are on the board
    for name in (
        "allot_gpus",
        "allot_jobs",
        "allot_pass_duration_seconds_bucket",
        "allot_budget_remaining_gpu_hours",
        "allot_charged_gpu_hours_total",
        "allot_preemptions_total",
    ):
        assert name in named


def test_every_panel_reads_the_chosen_datasource():
    board = json.loads(DASHBOARD.read_text())
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
