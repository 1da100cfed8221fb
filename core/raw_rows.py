"""Model instances from hand-written SQL, for the lookups every API call makes.

``Model.objects.raw()`` works out, on every query, which columns map to which fields and
how to convert them (~400 Python calls a lookup); an API submission made three such lookups
and the token's, the bulk of its Python. ``reading(Model)`` works that out once per model:
``columns("t")`` is the select list (``t."id", t."name", ...``, in the order of the model's
concrete fields, whatever the table's own column order) and ``instance(values)`` builds the
instance from those values, converted by the converters the ORM applies (SQLite returns
datetimes as text, JSON as text...), as a queryset would build it.
"""

from __future__ import annotations

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connection, connections


class Reading:
    __slots__ = ("model", "names", "converters", "width", "_columns")

    def __init__(self, model):
        self.model = model
        self.names, self.converters, self._columns = [], [], []
        for field in model._meta.concrete_fields:
            col = field.get_col(model._meta.db_table)
            self.names.append(field.attname)
            self._columns.append(connection.ops.quote_name(field.column))
            self.converters.append(
                tuple((convert, col) for convert in connection.ops.get_db_converters(col))
                + tuple((convert, col) for convert in col.get_db_converters(connection))
            )
        self.width = len(self.names)

    def columns(self, alias: str) -> str:
        return ", ".join(f"{alias}.{column}" for column in self._columns)

    def instance(self, values):
        db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself, not the thread-local proxy
        converted = []
        for converters, value in zip(self.converters, values, strict=True):
            for convert, col in converters:
                value = convert(value, col, db)
            converted.append(value)
        return self.model.from_db(DEFAULT_DB_ALIAS, self.names, converted)


@cache
def reading(model) -> Reading:
    return Reading(model)


def table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)
