"""Locks by key for the processes sharing one SQLite database (web, worker, beat): what
PostgreSQL's advisory locks are, which SQLite has none of.

A lock is an ``flock`` on a file in a folder beside the database, so it dies with the process
that held it, as an advisory lock dies with its connection. Each holder opens the file anew:
``flock`` belongs to the open file, not to the process (unlike ``fcntl``'s record locks), so
the threads of one process wait for each other too. Keys share ``SLOTS`` files per namespace:
two keys in one slot only wait for each other, never for a transaction. A holder takes one
lock at a time (a second one in the same slot would wait for itself).

Not a transaction: on SQLite every transaction holds the database's single write lock
(``BEGIN IMMEDIATE``), so a lock held for a slow outside call (an ``sbatch``) through a
transaction stops every writer for that long.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SLOTS = 64


def folder(connection) -> Path:
    """``<database>-locks`` beside the database file; for an in-memory database, which only
    its own process sees, a folder of that process."""
    if connection.is_in_memory_db():
        return Path(tempfile.gettempdir()) / f"allot-{os.getpid()}-locks"
    return Path(f"{connection.settings_dict['NAME']}-locks")


@contextmanager
def held(connection, namespace: str, key: int) -> Iterator[None]:
    """Hold the lock of ``key`` in ``namespace`` for the database of ``connection``, waiting
    for its holder as long as it takes (the holders' own calls have time limits)."""
    where = folder(connection)
    where.mkdir(parents=True, exist_ok=True)
    with open(where / f"{namespace}-{key % SLOTS:02d}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
