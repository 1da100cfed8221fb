"""``allot exception``: ask for protection beyond the cap, a budget top-up or a reservation;
list requests; approve, reject or withdraw them."""

from __future__ import annotations

import datetime as dt

import click

from allot_cli import output
from allot_cli.durations import parse_duration
from allot_cli.errors import UsageProblem
from allot_cli.main import json_option, pass_state
from allot_cli.output import print_json

WHY = click.option("--why", "justification", default="", help="The justification approvers read.")
BASE = "/api/v1/exceptions/"


@click.group(
    epilog="""\b
Examples:
  allot exception protection 42 --hours 12 --why "final eval before the deadline"
  allot exception topup nlp/olmo --gpu-hours 500 --why "ablation sweep"
  allot exception reservation --cluster jupiter --gpus 64 --start 2026-12-03T08:00 \\
      --for 24h --project nlp/olmo --why "7B pretraining run"
  allot exception list --state submitted
  allot exception approve 7 --comment "ok for this week\""""
)
def exception():
    """Requests that bend a rule, and their approval."""


def _file(state, as_json, kind, **fields):
    """File a request of ``kind`` with ``fields`` (those given as None left out)."""
    payload = {"kind": kind, **{k: v for k, v in fields.items() if v is not None}}
    _said(state.client().post(BASE, payload), as_json)


def _said(row, as_json):
    """What the server answered about a request: as JSON, or a line."""
    if as_json:
        print_json(row)
    else:
        click.echo(f"Request {row['id']} ({row['kind']}) is {row['state']}.")


@exception.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option(
    "--hours",
    required=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Protected hours from each start.",
)
@WHY
@json_option
@pass_state
def protection(state, job_id, hours, justification, as_json):
    """Protect job JOB_ID for longer than the cap allows."""
    _file(
        state,
        as_json,
        "extended_protection",
        job=job_id,
        hours=str(hours),
        justification=justification,
    )


@exception.command()
@click.argument("node")
@click.option("--gpu-hours", required=True, type=click.FloatRange(min=0, min_open=True))
@WHY
@json_option
@pass_state
def topup(state, node, gpu_hours, justification, as_json):
    """Add GPU-hours to budget NODE (a path such as nlp/olmo, or an id)."""
    _file(
        state,
        as_json,
        "budget_topup",
        node=node,
        gpu_hours=str(gpu_hours),
        justification=justification,
    )


@exception.command()
@click.option("--cluster", "-c", required=True)
@click.option("--gpus", "-g", required=True, type=click.IntRange(min=1))
@click.option("--start", required=True, help="ISO time (2026-12-03T08:00), or a delay: 2h.")
@click.option("--end", help="ISO time, or a delay from now.")
@click.option("--for", "length", help="Instead of --end: how long, e.g. 24h.")
@click.option("--project", "-p", help="The budget path the reservation is for.")
@WHY
@json_option
@pass_state
def reservation(state, cluster, gpus, start, end, length, project, justification, as_json):
    """Reserve GPUs on a cluster for a window."""
    begins = _moment(start, "--start")
    if bool(end) == bool(length):
        raise UsageProblem("give one of --end and --for")
    if length:
        try:
            ends = begins + dt.timedelta(seconds=parse_duration(length))
        except ValueError as exc:
            raise UsageProblem(f"--for: {exc}") from None
    else:
        ends = _moment(end, "--end")
    _file(
        state,
        as_json,
        "reservation",
        cluster=cluster,
        gpus=gpus,
        start=begins.isoformat(),
        end=ends.isoformat(),
        justification=justification,
        node=project or None,
    )


def _moment(text: str, flag: str) -> dt.datetime:
    try:
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageProblem(f"{flag}: {text!r} is neither an ISO time nor a delay like 2h") from None
    return moment if moment.tzinfo else moment.astimezone()  # a bare time is the reader's local


@exception.command("list")
@click.option(
    "--state",
    "-t",
    "states",
    type=click.Choice(["submitted", "approved", "rejected", "withdrawn", "active", "expired"]),
)
@click.option("--kind", type=click.Choice(["extended_protection", "budget_topup", "reservation"]))
@json_option
@pass_state
def list_requests(state, states, kind, as_json):
    """Requests you may see (yours, and those you may decide)."""
    rows = state.client().get_all(BASE, state=states, kind=kind)
    if as_json:
        print_json(rows)
    else:
        from allot_cli import views

        output.show(views.exception_table(rows))


@exception.command()
@click.argument("request_id", type=click.IntRange(min=1))
@json_option
@pass_state
def show(state, request_id, as_json):
    """One request and its decisions."""
    row = state.client().get(f"{BASE}{request_id}/")
    if as_json:
        print_json(row)
    else:
        from allot_cli import views

        output.show(views.exception_block(row))


def _decide(state, request_id, verb, payload, as_json):
    _said(state.client().post(f"{BASE}{request_id}/{verb}/", payload), as_json)


@exception.command()
@click.argument("request_id", type=click.IntRange(min=1))
@click.option("--comment", default="", help="For the audit and the requester.")
@json_option
@pass_state
def approve(state, request_id, comment, as_json):
    """Approve a request (approvers in its scope; never your own)."""
    _decide(state, request_id, "approve", {"comment": comment}, as_json)


@exception.command()
@click.argument("request_id", type=click.IntRange(min=1))
@click.option("--reason", default="", help="Why not; the requester reads it.")
@json_option
@pass_state
def reject(state, request_id, reason, as_json):
    """Reject a request."""
    _decide(state, request_id, "reject", {"reason": reason}, as_json)


@exception.command()
@click.argument("request_id", type=click.IntRange(min=1))
@json_option
@pass_state
def withdraw(state, request_id, as_json):
    """Withdraw your own request."""
    _decide(state, request_id, "withdraw", None, as_json)
