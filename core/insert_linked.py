"""A new row and the rows that point at it, written by one statement.

An API submission writes a job and its first event. Through the ORM that is four round trips
(``BEGIN``, two ``INSERT``s, ``COMMIT``) and ~2,000 Python calls composing the two inserts
— the API's hottest write. On PostgreSQL ``insert_linked`` sends one statement, atomic by itself::

    WITH p AS (INSERT INTO parent (...) VALUES (...) RETURNING id)
    INSERT INTO child (link_id, ...) VALUES ((SELECT id FROM p), ...), ... RETURNING link_id, id

Its text is made once per (models, link, number of children); each call only prepares the
values, as the ORM's insert prepares them (``pre_save`` then ``get_db_prep_save``, so
defaults, ``auto_now`` and JSON are what ``save()`` would write). Other databases (SQLite
cannot put an ``INSERT`` in a ``WITH``), and models with save signals connected, take the
ORM's saves in one transaction. Either way the instances come back saved: primary keys set,
``_state`` as after ``save()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.models import signals


def insert_linked(parent: models.Model, children: Sequence[models.Model], link: str) -> None:
    """Insert ``parent``, then ``children`` with their foreign key ``link`` set to it."""
    Parent, Child = type(parent), type(children[0]) if children else None
    if (
        connection.vendor != "postgresql"
        or not children
        or any(type(child) is not Child for child in children)
        or _has_save_signals(Parent)
        or _has_save_signals(Child)
    ):
        _through_the_orm(parent, children, link)
        return
    sql, parent_fields, child_fields = _statement(Parent, Child, link, len(children))
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself, not the thread-local proxy
    params = _prepared(parent, parent_fields, db)
    for child in children:
        params += _prepared(child, child_fields, db)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = sorted(cursor.fetchall(), key=lambda row: row[1])  # keys are given in VALUES order
    parent.pk = rows[0][0]
    _saved(parent)
    for child, (_, child_pk) in zip(children, rows, strict=True):
        setattr(child, link, parent)
        child.pk = child_pk
        _saved(child)


def _through_the_orm(parent, children, link) -> None:
    with transaction.atomic():
        parent.save(force_insert=True)
        for child in children:
            setattr(child, link, parent)
            child.save(force_insert=True)


def _has_save_signals(model) -> bool:
    return signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model)


def _written(model) -> list:
    """The fields an insert writes: every concrete field but a database-generated key."""
    return [
        field
        for field in model._meta.concrete_fields
        if not (field.primary_key and field.db_returning) and not getattr(field, "generated", False)
    ]


@cache
def _statement(Parent, Child, link: str, count: int) -> tuple[str, list, list]:
    quote = connection.ops.quote_name
    link_field = Child._meta.get_field(link)
    parent_fields = _written(Parent)
    child_fields = [f for f in _written(Child) if f is not link_field]
    parent_pk = quote(Parent._meta.pk.column)

    def marks(fields):
        return ", ".join(["%s"] * len(fields))

    child_rows = ", ".join(
        f"((SELECT {parent_pk} FROM p), {marks(child_fields)})" for _ in range(count)
    )
    sql = (
        f"WITH p AS (INSERT INTO {quote(Parent._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in parent_fields)}) VALUES ({marks(parent_fields)}) "
        f"RETURNING {parent_pk}) "
        f"INSERT INTO {quote(Child._meta.db_table)} ({quote(link_field.column)}, "
        f"{', '.join(quote(f.column) for f in child_fields)}) VALUES {child_rows} "
        f"RETURNING {quote(link_field.column)}, {quote(Child._meta.pk.column)}"
    )
    return sql, parent_fields, child_fields


def _prepared(instance, fields, db) -> list:
    return [field.get_db_prep_save(field.pre_save(instance, True), db) for field in fields]


def _saved(instance) -> None:
    instance._state.adding = False
    instance._state.db = connection.alias
