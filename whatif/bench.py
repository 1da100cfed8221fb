"""How long a preview of the demo organisation's last four weeks takes (``bench_whatif``).

``record_history`` gives the seeded demo organisation (``seed_demo``: 1,368 GPUs in three
clusters, ten projects, thirty researchers) four weeks of finished jobs, as the records would
hold them: sizes from the demo's mix (1–64 GPUs), work log-uniform between 15 minutes and a
day, minimum runtimes of 30 minutes to 2 hours, one job in five unfunded, four in five
resumable, spread over the clusters by capacity, until the GPU-hours submitted reach
``load`` × the four weeks' capacity. Seeded, so every run records the same history.

``time_previews`` then times a cold preview (export, both replays, nothing cached; median of
``repeat``), then once each a second proposal on the same workload (the current replay comes
from the cache) and asking again (the stored result).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import resource
import statistics
import time

from django.db import transaction
from django.utils import timezone

from budgets.access import user_projects
from budgets.models import Role
from scheduling.demo import SIZES
from scheduling.models import Cluster, Job
from whatif import services
from whatif.models import Preview, Workload

NAME = "history"


def record_history(weeks: float = 4, load: float = 1.0, seed: int = 3) -> int:
    rng = random.Random(seed)
    now = timezone.now()
    span = weeks * 7 * 86400
    clusters = [(c, sum(n.gpus for n in c.nodes.all())) for c in Cluster.objects.order_by("name")]
    capacity = sum(g for _, g in clusters) * span / 3600
    people = sorted(
        {r.user for r in Role.objects.filter(role=Role.Kind.RESEARCHER).select_related("user")},
        key=lambda u: u.username,
    )
    projects = {p: list(user_projects(p)) for p in people}
    rows, submitted = [], 0.0
    while submitted < capacity * load:
        cluster = rng.choices([c for c, _ in clusters], weights=[g for _, g in clusters])[0]
        person = rng.choice(people)
        funded = rng.random() >= 0.2 and projects[person]
        project = rng.choice(projects[person]) if funded else None
        gpus = rng.choice(SIZES)
        work = math.exp(rng.uniform(math.log(900), math.log(86400)))
        submit = now - dt.timedelta(seconds=rng.uniform(0, span))
        end = min(submit + dt.timedelta(seconds=work), now)
        rows.append(
            Job(
                name=NAME, owner=person, project=project, cluster=cluster, gpus=gpus,
                min_runtime_s=rng.choice([1800, 3600, 3600, 7200]),
                resumable=rng.random() < 0.8, state=Job.State.COMPLETED, submitted_at=submit,
                first_started_at=submit, started_at=submit, ended_at=end,
                run_seconds_done=int((end - submit).total_seconds()), attempt=1,
            )
        )  # fmt: skip
        submitted += gpus * work / 3600
    with transaction.atomic():
        Job.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the second replay)."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _preview(user, grants: dict) -> tuple[float, float, Preview]:
    wall, cpu = time.perf_counter(), _cpu()
    preview = services.request_preview(user, 4, grants)
    services.run_preview(preview.pk)
    preview.refresh_from_db()
    return time.perf_counter() - wall, _cpu() - cpu, preview


def time_previews(user, repeat: int = 3) -> dict:
    """Median seconds (wall, and CPU of this process and the second replay's) of each kind
    of preview, and the load average when it ended (the machine may be shared)."""
    cold, warm, hit = [], [], []
    jobs = 0
    for i in range(repeat):
        Workload.objects.all().delete()  # nothing cached: read the records, run both replays
        grants = {"nlp/tulu": str(200_000 + i), "nlp/olmo": "150000"}
        wall, cpu, preview = _preview(user, grants)
        assert preview.status == Preview.Status.DONE, preview.error
        jobs = preview.workload.jobs
        cold.append((wall, cpu))
    wall, cpu, _ = _preview(user, {**grants, "nlp/olmo": "160000"})  # current cached
    warm.append((wall, cpu))
    wall, cpu, _ = _preview(user, grants)  # asked again: the stored result
    hit.append((wall, cpu))

    def median(pairs):
        return {
            "wall_s": round(statistics.median(p[0] for p in pairs), 2),
            "cpu_s": round(statistics.median(p[1] for p in pairs), 2),
            "runs": [round(p[0], 2) for p in pairs],
        }

    return {
        "jobs": jobs,
        "cold": median(cold),
        "new_proposal": median(warm),
        "again": median(hit),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
