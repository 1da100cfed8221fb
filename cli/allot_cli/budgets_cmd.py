"""``allot budgets``: the budget nodes the caller may see, with this period's numbers."""

from __future__ import annotations

import click

from allot_cli.main import json_option, pass_state
from allot_cli.output import print_json, show


@click.command(
    epilog="""\b
Examples:
  allot budgets
  allot budgets --under nlp
  allot budgets --json | jq '.[] | {path, remaining_gpu_hours}'

GRANT, USED, HELD (liens of running jobs' protected windows) and LEFT are cost-normalised
GPU-hours of the current period; BURN/DAY is what was charged in the last 24 hours."""
)
@click.option("--under", metavar="PATH", help="Only this node and its descendants.")
@json_option
@pass_state
def budgets(state, under, as_json):
    """Budgets you may see: grant, used, held, remaining, burn."""
    nodes = state.client().get_all("/api/v1/budgets/", limit=10_000)
    if under:
        prefix = under.strip("/")
        nodes = [n for n in nodes if n["path"] == prefix or n["path"].startswith(prefix + "/")]
    if as_json:
        print_json(nodes)
    else:
        from allot_cli import views

        show(views.budget_table(nodes))
