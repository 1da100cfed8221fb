"""Per-pass reports written in bulk: the waiting jobs' reason, position and estimate, and the
running jobs' explanations.

Django's ``bulk_update`` sends one ``UPDATE ... SET col = CASE WHEN id = 1 THEN ... WHEN id = 2
THEN ...`` per column per batch: building and parsing those expressions cost 5.1 of a 5.7 s
refill pass over 4,700 waiting jobs (issue 12). Instead:

- PostgreSQL: one ``UPDATE scheduling_job AS j SET ... FROM (VALUES (...), ...) AS v(...)
  WHERE j.id = v.id`` per batch. Every value is a bound parameter (psycopg), and the first
  row's placeholders carry explicit casts, which type the whole ``VALUES`` column.
- Other databases (SQLite): ``executemany`` of one plain ``UPDATE ... WHERE id = %s``, a single
  prepared statement run once per row, which SQLite runs in-process without a round trip.

Values go through each field's ``get_db_prep_value``, so datetimes and JSON are stored exactly
as the ORM would store them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection

from scheduling.models import Job

WAITING_FIELDS = ("pending_code", "pending_message", "queue_position", "estimated_start")
EXPLANATION_FIELDS = ("explanation",)
# PostgreSQL accepts at most 65,535 bind parameters in one statement.
MAX_PARAMETERS = 60_000


def write_waiting(jobs: Sequence[Job]) -> None:
    """Store the pass's report (reason, position, estimate) on these waiting jobs."""
    update_columns(jobs, WAITING_FIELDS)


def write_explanations(jobs: Sequence[Job]) -> None:
    update_columns(jobs, EXPLANATION_FIELDS)


def update_columns(jobs: Sequence[Job], names: Iterable[str]) -> None:
    """Write ``names`` from each job instance to its row, in as few statements as the database
    allows. Rows that no longer exist are skipped, as with ``bulk_update``."""
    if not jobs:
        return
    fields = [Job._meta.get_field(name) for name in names]
    rows = [
        [f.get_db_prep_value(getattr(job, f.attname), connection) for f in fields] + [job.pk]
        for job in jobs
    ]
    if connection.vendor == "postgresql":
        _update_from_values(fields, rows)
    else:
        _update_each(fields, rows)


def _update_from_values(fields: list, rows: list[list]) -> None:
    qn = connection.ops.quote_name
    table = qn(Job._meta.db_table)
    pk = Job._meta.pk
    casts = [f.db_type(connection) for f in fields] + [pk.rel_db_type(connection)]
    first = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
    other = "(" + ", ".join(["%s"] * len(casts)) + ")"
    names = [f"c{i}" for i in range(len(fields))]
    assignments = ", ".join(f"{qn(f.column)} = v.{n}" for f, n in zip(fields, names, strict=True))
    batch = max(1, MAX_PARAMETERS // len(casts))
    with connection.cursor() as cursor:
        for begin in range(0, len(rows), batch):
            chunk = rows[begin : begin + batch]
            values = ", ".join([first] + [other] * (len(chunk) - 1))
            sql = (
                f"UPDATE {table} AS j SET {assignments} "
                f"FROM (VALUES {values}) AS v({', '.join(names)}, id) "
                f"WHERE j.{qn(pk.column)} = v.id"
            )
            cursor.execute(sql, [value for row in chunk for value in row])


def _update_each(fields: list, rows: list[list]) -> None:
    qn = connection.ops.quote_name
    assignments = ", ".join(f"{qn(f.column)} = %s" for f in fields)
    sql = f"UPDATE {qn(Job._meta.db_table)} SET {assignments} WHERE {qn(Job._meta.pk.column)} = %s"
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
