"""Jobs: ``submit``, ``queue``, ``status``, ``why``, ``cancel``."""

from __future__ import annotations

from pathlib import Path

import click

from allot_cli.durations import Duration
from allot_cli.errors import UsageProblem
from allot_cli.main import json_option, pass_state
from allot_cli.output import print_json, show

ACTIVE = "pending,running,preempted"
TERMINAL = {"completed", "failed", "cancelled"}


class CommandAfterDashes(click.Command):
    """Everything after the first ``--`` is the job's command, set aside before Click parses,
    so a word of it is never taken for the job file or an option."""

    def parse_args(self, ctx, args):
        args = list(args)
        if "--" in args:
            cut = args.index("--")
            ctx.meta["allot.command"] = args[cut + 1 :]
            args = args[:cut]
        else:
            ctx.meta["allot.command"] = []
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx):
        return [*super().collect_usage_pieces(ctx), "[-- COMMAND...]"]


@click.command(
    cls=CommandAfterDashes,
    epilog="""\b
Examples:
  allot submit --project nlp/olmo --cluster jupiter --gpus 8 --min-runtime 2h \\
      --name sweep-1 -- python train.py --lr 3e-4
  allot submit job.yaml                      # fields in a YAML file (see docs/cli.md)
  allot submit job.yaml --gpus 16            # flags win over the file
  allot submit --cluster jupiter --gpus 1 --min-runtime 30m --kind interactive -- bash

Everything after `--` is the command; its words reach the job exactly as typed.""",
)
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@click.option("--name", help="A name for the job (default: the command's first word).")
@click.option("--project", "-p", help="Budget path that pays, e.g. nlp/olmo; empty: unfunded.")
@click.option("--cluster", "-c", help="Cluster name.")
@click.option("--gpus", "-g", type=click.IntRange(min=1), help="GPUs, all at once.")
@click.option("--min-runtime", type=Duration(), help="Protected minimum runtime: 90m, 2h, 1h30m.")
@click.option("--resumable/--not-resumable", default=None, help="Can it resume after preemption?")
@click.option("--kind", type=click.Choice(["batch", "interactive"]), help="Default: batch.")
@click.option(
    "--env", "-e", "env", multiple=True, metavar="NAME=VALUE", help="A variable for the job."
)
@click.option(
    "--sim-duration", type=Duration(), help="Simulated cluster only: how long the job runs."
)
@json_option
@pass_state
def submit(state, job_file, as_json, **flags):
    """Submit a job; print its id."""
    command = click.get_current_context().meta["allot.command"]
    payload = _payload(job_file, command, flags)
    job = state.client().post("/api/v1/jobs/", payload)
    if as_json:
        print_json(job)
    else:
        click.echo(job["id"])


def _payload(job_file, command, flags) -> dict:
    from allot_cli.jobfile import join_command, read_job_file  # YAML only for submit

    if job_file and (job_file.endswith((".sh", ".py")) or not Path(job_file).is_file()):
        raise UsageProblem(
            f"{job_file}: no such job file (a job file is YAML; a command goes after `--`: "
            f"allot submit ... -- {job_file})"
        )
    payload = read_job_file(job_file) if job_file else {}
    renames = {"min_runtime": "min_runtime_s", "sim_duration": "sim_duration_s"}
    for key, value in flags.items():
        if value is None or key == "env":
            continue
        payload[renames.get(key, key)] = value
    if flags.get("env"):
        env = dict(payload.get("env") or {})
        for item in flags["env"]:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise UsageProblem(f"--env: {item!r} is not NAME=VALUE")
            env[name] = value
        payload["env"] = env
    if command:
        payload["command"] = join_command(list(command))
    if not payload.get("name"):
        first = (list(command) or [""])[0].rsplit("/", 1)[-1]
        payload["name"] = first or "job"
    missing = [flag for flag, key in _REQUIRED if key not in payload]
    if missing:
        raise UsageProblem(f"missing {', '.join(missing)} (or give them in a job file)")
    return payload


_REQUIRED = (("--cluster", "cluster"), ("--gpus", "gpus"), ("--min-runtime", "min_runtime_s"))


@click.command(
    epilog="""\b
Examples:
  allot queue                       # every active job you may see
  allot queue --mine --cluster jupiter
  allot queue --state completed --limit 20
  allot queue --watch               # refresh every 5 s; Ctrl-C stops"""
)
@click.option("--cluster", "-c", help="Only this cluster.")
@click.option("--mine", is_flag=True, help="Only your jobs.")
@click.option("--user", "-u", help="Only this user's jobs.")
@click.option("--project", "-p", help="Only jobs paid by this budget path (and below).")
@click.option(
    "--state",
    "-t",
    "states",
    default=ACTIVE,
    show_default=True,
    help="Comma-separated states (pending, running, preempted, completed, failed, cancelled).",
)
@click.option("--limit", type=click.IntRange(min=1), default=500, show_default=True)
@click.option("--watch", "-w", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=1), default=5.0, show_default=True)
@json_option
@pass_state
def queue(state, cluster, mine, user, project, states, limit, watch, interval, as_json):
    """The queue, like squeue: position, reason and estimated start of each job."""
    params = {
        "cluster": cluster,
        "mine": "true" if mine else None,
        "owner": user,
        "project": project,
        "state": states,
        "order": "queue",
    }
    client = state.client()

    def fetch():
        return client.get_all("/api/v1/jobs/", limit=limit, **params)

    from allot_cli import views
    from allot_cli.watch import watch_loop

    watch_loop(fetch, views.queue_table, as_json, watch, interval)


@click.command(epilog="Example:\n  allot status 42 --watch")
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--watch", "-w", is_flag=True, help="Refresh in place until the job ends.")
@click.option("--interval", type=click.FloatRange(min=1), default=5.0, show_default=True)
@json_option
@pass_state
def status(state, job_id, watch, interval, as_json):
    """One job: state, funding, protection, position and reason."""
    from allot_cli import views
    from allot_cli.watch import watch_loop

    client = state.client()
    watch_loop(
        lambda: client.get(f"/api/v1/jobs/{job_id}/"),
        views.status_block,
        as_json,
        watch,
        interval,
        done=lambda job: job.get("state") in TERMINAL,
    )


@click.command(epilog="Example:\n  allot why 42")
@click.argument("job_id", type=click.IntRange(min=1))
@json_option
@pass_state
def why(state, job_id, as_json):
    """Why a job consumes GPU-hours (or why it waits): who pays, rate, protection, standing."""
    client = state.client()
    explanation = client.get(f"/api/v1/jobs/{job_id}/explain/")
    if as_json:
        print_json(explanation)
        return
    job = client.get(f"/api/v1/jobs/{job_id}/")
    from allot_cli import views

    show(views.why_block(job, explanation))


@click.command(epilog="Example:\n  allot cancel 42")
@click.argument("job_id", type=click.IntRange(min=1))
@json_option
@pass_state
def cancel(state, job_id, as_json):
    """Cancel a job (yours, or any as a cluster admin)."""
    job = state.client().post(f"/api/v1/jobs/{job_id}/cancel/")
    if as_json:
        print_json(job)
    else:
        click.echo(f"Job {job['id']} ({job.get('name', '')}) is {job.get('state')}.")


COMMANDS = (submit, queue, status, why, cancel)
