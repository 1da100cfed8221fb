"""The pass's read of its cluster's live jobs: one statement, rows kept as tuples, model
instances built only for the jobs the pass writes.

A pass reads every pending and running job of its cluster (5,000 in `bench_live`'s scenario), but
writes model instances for only a few of them: its starts, the running jobs it explains,
preempts or defunds. The waiting jobs' report is compared and written from the rows. So:

1. One query reads the columns the pass uses (``READ``). On PostgreSQL the datetimes come as
   whole microseconds since the epoch (``EpochMicros``): psycopg parses an integer in C, while
   Django's time-zone-aware loader parsed every timestamp in Python (a sixth of a steady
   pass's CPU). The JSON columns come as text, parsed only for the instances built.
2. ``LiveJobs`` keeps the rows, and builds a job's instance the first time the pass asks for
   it (``jobs[job_id]``): what ``Model.from_db`` gives, the same attribute values (the
   microseconds turned back into the aware datetimes the ORM loads), saved state and
   database alias, the cluster and budget rows the pass holds already attached.
3. What the pass reads of every job (the engine's inputs, the waiting report it compares
   against) it reads from the rows (``value``, ``report``), never building an instance.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from operator import itemgetter

from django.db import NotSupportedError, connection
from django.db.models import BigIntegerField, DateTimeField, F, Func, JSONField, TextField
from django.db.models.base import ModelState
from django.db.models.functions import Cast

from scheduling.models import Cluster, Job

# Job columns neither the engine nor the pass's writes read: not loaded for thousands of rows.
# (A start's dispatch task reads its job again.)
NOT_READ = (
    "command",
    "env",
    "external_id",
    "gpu_utilization",
    "exit_code",
    "last_error",
    "utilization_at",
    "wasted_gpu_seconds",
    "idle_notified_at",
)
READ = tuple(f.attname for f in Job._meta.concrete_fields if f.name not in NOT_READ)
# The JSON columns the pass reads, as text (parsed only when an instance is built).
JSON_READ = tuple(
    f.attname
    for f in Job._meta.concrete_fields
    if isinstance(f, JSONField) and f.name not in NOT_READ
)
TIMES = tuple(
    f.attname
    for f in Job._meta.concrete_fields
    if isinstance(f, DateTimeField) and f.name not in NOT_READ
)
COLUMN = {name: index for index, name in enumerate(READ)}
_EPOCH = datetime.fromtimestamp(0, UTC)
_MICROSECOND = timedelta(microseconds=1)
PER_SECOND = timedelta(seconds=1) // _MICROSECOND


class EpochMicros(Func):
    """A timestamp as whole microseconds since the epoch, on PostgreSQL (``EXTRACT`` gives
    an exact numeric since version 14). The value is already an integer: no converter."""

    output_field = BigIntegerField()

    def as_sql(self, compiler, connection, **extra_context):
        raise NotSupportedError("EpochMicros is PostgreSQL's (live_rows reads datetimes elsewhere)")

    def as_postgresql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(EXTRACT(EPOCH FROM {sql}) * 1000000)::bigint", params

    def get_db_converters(self, connection):
        return []


def micros(moment: datetime | None) -> int | None:
    """An aware datetime as whole microseconds since the epoch (exact)."""
    return None if moment is None else (moment - _EPOCH) // _MICROSECOND


def from_micros(value: int | None, tz=UTC) -> datetime | None:
    if value is None:
        return None
    moment = _EPOCH + timedelta(microseconds=value)
    return moment if tz is UTC else moment.astimezone(tz)


def live_rows(cluster: Cluster) -> list[tuple]:
    """The cluster's pending and running jobs in submit order: one tuple of ``READ`` values
    a job, datetimes as microseconds (``micros``), JSON columns as text. One query."""
    postgresql = connection.vendor == "postgresql"
    special = {name: Cast(name, TextField()) for name in JSON_READ}
    if postgresql:
        special |= {name: EpochMicros(F(name)) for name in TIMES}
    rows = (
        Job.objects.filter(cluster=cluster, state__in=[Job.State.PENDING, Job.State.RUNNING])
        .order_by("submitted_at", "id")
        .annotate(**{f"{name}__read": expression for name, expression in special.items()})
        .values_list(*(f"{n}__read" if n in special else n for n in READ))
    )
    if postgresql:
        # Every value is already what the pass wants (no converter on these columns here):
        # the cursor's rows as they are, without the ORM's chunked iteration and per-row
        # tuple copies (a third of the read's Python for 5,000 rows).
        sql, params = rows.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    times = [COLUMN[name] for name in TIMES]
    out = []
    for row in rows:  # elsewhere (SQLite) the ORM gives datetimes: the same microseconds
        row = list(row)
        for i in times:
            row[i] = micros(row[i])
        out.append(tuple(row))
    return out


def _json(text: str | None):
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return None if text is None else json.loads(text)


class LiveJobs(Mapping):
    """The pass's live jobs by id (``str(pk)``): the rows, and each job's model instance
    built on first access (``jobs[job_id]``) and kept, so a change the pass makes to it is
    seen by every later reader."""

    def __init__(self, rows: list[tuple], cluster: Cluster, budget_rows: Mapping[int, object]):
        self.rows = {str(row[0]): row for row in rows}
        self.built: dict[str, Job] = {}
        self._cluster = cluster
        self._budget_rows = budget_rows
        self._db = Job.objects.db
        self._tz = connection.timezone or UTC

    def __getitem__(self, key: str) -> Job:
        job = self.built.get(key)
        if job is None:
            job = self.built[key] = self._build(self.rows[key])
        return job

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, key) -> bool:
        return key in self.rows

    def value(self, key: str, name: str):
        """One attribute of a job as its instance holds it (datetimes aware), without
        building the instance."""
        job = self.built.get(key)
        if job is not None:
            return getattr(job, name)
        value = self.rows[key][COLUMN[name]]
        if name in TIMES:
            return from_micros(value, self._tz)
        if name in JSON_READ:
            return _json(value)
        return value

    def report(self, key: str) -> tuple | None:
        """(state, pending_code, pending_message, queue_position, estimated_start in
        microseconds) as the pass read them, or as the pass has since changed them; None
        for a job the pass did not read."""
        job = self.built.get(key)
        if job is None:
            row = self.rows.get(key)
            return None if row is None else _report(row)
        return (
            job.state,
            job.pending_code,
            job.pending_message,
            job.queue_position,
            micros(job.estimated_start),
        )

    def _build(self, row: tuple) -> Job:
        values = dict(zip(READ, row, strict=True))
        for name in JSON_READ:
            values[name] = _json(values[name])
        for name in TIMES:
            values[name] = from_micros(values[name], self._tz)
        job = Job.__new__(Job)
        job.__dict__.update(values)
        job._state = ModelState()
        job._state.adding, job._state.db = False, self._db
        # The rows this pass already holds, so that writing a start (its funding chain, its
        # price) reads no budget node or cluster per job.
        Job.cluster.field.set_cached_value(job, self._cluster)
        if job.project_id in self._budget_rows:
            Job.project.field.set_cached_value(job, self._budget_rows[job.project_id])
        return job


REPORT = ("state", "pending_code", "pending_message", "queue_position", "estimated_start")
_report = itemgetter(*(COLUMN[name] for name in REPORT))
