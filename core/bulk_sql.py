"""Many rows of one table changed by one statement: the live loop's writes at scale.

``update_many`` sets columns on many rows, each row its own values, in one ``UPDATE``:

- PostgreSQL: ``UPDATE t SET a = v.c1, ... FROM (SELECT (e->>0)::bigint AS c0, (e->>1)::varchar
  AS c1, ... FROM jsonb_array_elements(%s::jsonb) AS e) AS v WHERE t.key = v.c0``. The rows
  travel as ONE bound parameter, a JSON array of arrays, each value cast to its field's column
  type, so there is no limit on the number of rows (bind parameters are limited to 65,535) and
  the statement's text is the same whatever the number of rows.
- Other databases (SQLite): ``executemany`` of one plain ``UPDATE ... WHERE key = %s``, one
  prepared statement run per row, in-process.

Optional conditions keep the guards the ORM's conditional updates had: ``where`` holds
constants every row must still match (``state = 'pending'``: a concurrent change is detected
by the row count), ``unchanged`` columns that must still hold the per-row value the caller
read (compared null-safely), and ``add`` columns that are incremented rather than set.

Values are Python values as the model holds them; each goes through its field's
``get_db_prep_value`` (SQLite) or the same conversion to JSON text (PostgreSQL: datetimes as
ISO 8601 with their offset, JSON fields nested as JSON), so what is stored is what the ORM
would store.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

from django.db import DEFAULT_DB_ALIAS, connection, connections, models


def update_many(
    model: type[models.Model],
    key: str,
    fields: Sequence[str],
    rows: Iterable[Sequence],
    *,
    unchanged: Sequence[str] = (),
    add: Sequence[str] = (),
    where: Mapping[str, object] | None = None,
) -> int:
    """Update ``model``'s rows matched on ``key``; returns the number of rows changed.

    Each row is ``(key value, *fields values, *add values, *unchanged values)``: ``fields``
    are set, ``add`` columns get the value added, ``unchanged`` columns must still equal the
    value given (NULL equals NULL), ``where`` columns must equal their constant (None: IS
    NULL). A row that no longer exists or fails a condition is left alone and not counted.
    """
    # In key order: the rows are then visited as they lie in the table and index (jobs are
    # inserted in id order; 7 % less time for a report of 4,700 rows), and every writer
    # locks them in the same order. The sort is stable: a key given twice keeps its order.
    rows = sorted(rows, key=itemgetter(0))
    if not rows:
        return 0
    meta = model._meta
    key_field = meta.pk if key == "pk" else meta.get_field(key)
    set_fields = [meta.get_field(name) for name in fields]
    add_fields = [meta.get_field(name) for name in add]
    old_fields = [meta.get_field(name) for name in unchanged]
    where_fields = [(meta.get_field(name), value) for name, value in (where or {}).items()]
    width = 1 + len(set_fields) + len(add_fields) + len(old_fields)
    if any(len(row) != width for row in rows):
        raise ValueError(f"every row needs {width} values")
    columns = [key_field, *set_fields, *add_fields, *old_fields]
    if connection.vendor == "postgresql":
        return _from_json(model, columns, set_fields, add_fields, old_fields, where_fields, rows)
    return _each(model, columns, set_fields, add_fields, old_fields, where_fields, rows)


def _where_constants(where_fields, table_alias: str) -> tuple[list[str], list]:
    qn = connection.ops.quote_name
    sql, params = [], []
    for field, value in where_fields:
        column = f"{table_alias}{qn(field.column)}"
        if value is None:
            sql.append(f"{column} IS NULL")
        else:
            sql.append(f"{column} = %s")
            params.append(field.get_db_prep_value(value, connection))
    return sql, params


def _from_json(model, columns, set_fields, add_fields, old_fields, where_fields, rows) -> int:
    qn = connection.ops.quote_name
    names = [f"c{i}" for i in range(len(columns))]
    rows, pools = _pooled(set_fields, rows)
    values = _values(columns, pools)
    set_names = names[1 : 1 + len(set_fields)]
    add_names = names[1 + len(set_fields) : 1 + len(set_fields) + len(add_fields)]
    old_names = names[1 + len(set_fields) + len(add_fields) :]
    assignments = [
        f"{qn(f.column)} = (%s::text[])[v.{n}]" if i in pools else f"{qn(f.column)} = v.{n}"
        for i, (f, n) in enumerate(zip(set_fields, set_names, strict=True), start=1)
    ]
    assignments += [
        f"{qn(f.column)} = t.{qn(f.column)} + v.{n}"
        for f, n in zip(add_fields, add_names, strict=True)
    ]
    conditions = [f"t.{qn(columns[0].column)} = v.{names[0]}"]
    conditions += [
        f"t.{qn(f.column)} IS NOT DISTINCT FROM v.{n}"
        for f, n in zip(old_fields, old_names, strict=True)
    ]
    constants, params = _where_constants(where_fields, "t.")
    document = _document(columns, rows)
    sql = (
        f"UPDATE {qn(model._meta.db_table)} AS t SET {', '.join(assignments)} "
        f"FROM {values} WHERE {' AND '.join(conditions + constants)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*pools.values(), document, *params])
        return cursor.rowcount


def _pooled(set_fields, rows: list) -> tuple[list, dict[int, list[str]]]:
    """Text columns whose values repeat (a report's ~4,700 messages are a dozen sentences)
    travel once, as an array, each row giving the value's place in it: with the rows as
    arrays (``_document``) a report's JSON shrinks from ~900 kB to ~100 kB, and with it the
    encoding, the quoting and PostgreSQL's parse. Returns the rows (with places for the
    pooled columns) and the pools by column position."""
    pools = {}
    for index, field in enumerate(set_fields, start=1):
        if not isinstance(field, models.CharField | models.TextField):
            continue
        values = [row[index] for row in rows]
        if not all(type(value) is str for value in values):
            continue
        distinct = dict.fromkeys(values)
        if len(distinct) * 4 > len(rows):
            continue  # too few repeats to be worth it
        pools[index] = list(distinct)
    if not pools:
        return rows, pools
    places = {index: {v: i for i, v in enumerate(pool, start=1)} for index, pool in pools.items()}
    rows = [list(row) for row in rows]
    for row in rows:
        for index, place in places.items():
            row[index] = place[row[index]]
    return rows, pools


def _values(columns, pools=()) -> str:
    """The rows of a ``_document`` as a table ``v`` with one column ``c<i>`` per field:
    ``(SELECT (e->>0)::bigint AS c0, ... FROM jsonb_array_elements(%s::jsonb) AS e) AS v``.
    Each value is cast to its column's type without the length (``varchar``, not
    ``varchar(32)``: an explicit cast would cut a long value short, where storing it raises,
    as the ORM's insert or update would); a JSON column takes the nested value (JSON null
    as SQL NULL); a pooled column is the place of its value (``_pooled``)."""
    picked = []
    for i, field in enumerate(columns):
        if i in pools:
            picked.append(f"(e->>{i})::integer AS c{i}")
        elif isinstance(field, models.JSONField):
            picked.append(f"NULLIF(e->{i}, 'null'::jsonb) AS c{i}")
        else:
            picked.append(f"(e->>{i})::{_column_type(field)} AS c{i}")
    return f"(SELECT {', '.join(picked)} FROM jsonb_array_elements(%s::jsonb) AS e) AS v"


def _column_type(field) -> str:
    """The field's column type without a length or precision (``varchar``, ``numeric``)."""
    if isinstance(field, models.ForeignKey | models.AutoField):
        kind = field.rel_db_type(connection)
    else:
        kind = field.db_type(connection)
    return re.sub(r"\(.*?\)", "", kind)


def insert_many(model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence]) -> int:
    """Insert rows of ``fields`` values (Python values, as the model holds them; a foreign key
    by its ``*_id`` name) in one statement: ``INSERT ... SELECT ... FROM jsonb_array_elements``
    on PostgreSQL, ``executemany`` elsewhere. No defaults are filled in (``auto_now_add``
    included): give every column the row needs. Returns the number of rows inserted."""
    rows = [list(row) for row in rows]
    if not rows:
        return 0
    qn = connection.ops.quote_name
    columns = [model._meta.get_field(name) for name in fields]
    names = ", ".join(qn(f.column) for f in columns)
    table = qn(model._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            picked = ", ".join(f"v.c{i}" for i in range(len(columns)))
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {picked} FROM {_values(columns)}",
                [_document(columns, rows)],
            )
        else:
            marks = ", ".join(["%s"] * len(columns))
            cursor.executemany(
                f"INSERT INTO {table} ({names}) VALUES ({marks})", _prepared(columns, rows)
            )
        return cursor.rowcount


def _prepared(columns: list, rows: list) -> list:
    """The rows' values as the database takes them, converted a column at a time: a column of
    plain values is taken as it is, and the others go through their field with the real
    connection (not its thread-local proxy, whose lookup cost more than the conversion).
    A datetime column converts each distinct instant once: rows written together (a job's
    events, its charges) repeat the same few times, and each conversion costs ~10 calls."""
    db = connections[DEFAULT_DB_ALIAS]
    converted: list[Sequence] = []
    for field, values in zip(columns, zip(*rows, strict=True), strict=True):
        if not isinstance(field, models.JSONField) and all(type(v) in _PLAIN for v in values):
            converted.append(values)
            continue
        prep = field.get_db_prep_value
        if isinstance(field, models.DateTimeField):
            once = {v: prep(v, db) for v in set(values)}
            converted.append([once[v] for v in values])
            continue
        converted.append([prep(v.pk if isinstance(v, models.Model) else v, db) for v in values])
    return list(zip(*converted, strict=True))


# Python values that go into the JSON document as they are (for a column that is not JSON).
_PLAIN = frozenset((int, str, bool, float, type(None)))


def _document(columns: list, rows: list) -> str:
    """The rows as one JSON array of arrays, each value as ``_json_value`` gives it.
    Converted a column at a time: a column of plain values (ids, codes, positions) is taken
    as it is, and when every column is, the rows are encoded as they are (objects keyed by
    column cost a report of 4,700 rows 5 ms more Python, for the same time in PostgreSQL)."""
    converted, changed = [], False
    for field, values in zip(columns, zip(*rows, strict=True), strict=True):
        if not isinstance(field, models.JSONField) and all(type(v) in _PLAIN for v in values):
            converted.append(values)
        else:
            converted.append([_json_value(field, value) for value in values])
            changed = True
    if changed:
        rows = list(zip(*converted, strict=True))
    return json.dumps(rows, separators=(",", ":"))


def _json_value(field, value):
    """``value`` as JSON that PostgreSQL reads back into the field's column type."""
    if value is None:
        return None
    if type(value) in (int, str, bool, float) and not isinstance(field, models.JSONField):
        return value  # what get_db_prep_value returns for these, unchanged
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.isoformat()  # aware: stored as this instant, as the ORM stores it
    if isinstance(field, models.JSONField):
        return value  # nested as JSON: the record's jsonb column takes it as it is
    if isinstance(field, models.ForeignKey) and isinstance(value, models.Model):
        value = value.pk
    value = field.get_db_prep_value(value, connection)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value


def _each(model, columns, set_fields, add_fields, old_fields, where_fields, rows) -> int:
    qn = connection.ops.quote_name
    assignments = [f"{qn(f.column)} = %s" for f in set_fields]
    assignments += [f"{qn(f.column)} = {qn(f.column)} + %s" for f in add_fields]
    conditions = [f"{qn(columns[0].column)} = %s"]
    same = "IS" if connection.vendor == "sqlite" else "IS NOT DISTINCT FROM"  # null-safe
    conditions += [f"{qn(f.column)} {same} %s" for f in old_fields]
    constants, params = _where_constants(where_fields, "")
    sql = (
        f"UPDATE {qn(model._meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE {' AND '.join(conditions + constants)}"
    )
    changed = len(set_fields) + len(add_fields)
    ordered = []
    for row in rows:
        values = [_prep(field, value) for field, value in zip(columns, row, strict=True)]
        # SET values, then the key, then the unchanged columns, then the constants.
        ordered.append([*values[1 : 1 + changed], values[0], *values[1 + changed :], *params])
    with connection.cursor() as cursor:
        cursor.executemany(sql, ordered)
        return cursor.rowcount


def _prep(field, value):
    if isinstance(value, models.Model):
        value = value.pk
    return field.get_db_prep_value(value, connection)
