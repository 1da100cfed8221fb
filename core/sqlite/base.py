"""SQLite for the zero-server demo: Django's backend, except that the write transactions of one
process wait in line for the database's write lock instead of all polling for it.

SQLite has one write lock for the whole database, taken here at ``BEGIN IMMEDIATE``. A writer
that finds it taken does not queue: SQLite's busy handler sleeps (1, 2, 5 ... 100 ms) and tries
again, and whoever tries at the right moment wins. With the demo's web server running 20
request threads, a waiter could lose every try to newer arrivals and wait out the whole busy
timeout — "database is locked", a 500 — although no transaction held the lock longer than 3 s
(measured under scripts/load-demo.py: submissions waiting 12-20 s). Here a process's write
transactions first take a process-wide lock, where threads block in turn instead of polling,
so only one thread per process (web, worker, beat) competes for SQLite's lock at a time.

The process lock is released when the transaction ends (commit or rollback: autocommit back
on) or the connection closes. A thread that cannot get it within the busy timeout goes on to
SQLite, whose own timeout then applies as before: a stuck holder never hangs the others.
"""

from __future__ import annotations

import threading
from collections import deque

from django.db.backends.sqlite3 import base


class FairLock:
    """A lock handed to its waiters in arrival order. (``threading.Lock`` is not: a thread that
    releases it and asks again at once, holding the GIL, usually wins it back, and a waiter can
    starve as it did on SQLite's busy handler.)"""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: deque[threading.Lock] = deque()
        self._held = False

    def acquire(self, timeout: float) -> bool:
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        if turn.acquire(timeout=timeout):
            return True  # handed over by release()
        with self._mutex:
            if turn in self._waiters:
                self._waiters.remove(turn)
                return False
        return True  # handed over just as the wait ran out: it is ours

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()  # still held: now by the first waiter
            else:
                self._held = False


_writer = FairLock()


class DatabaseWrapper(base.DatabaseWrapper):
    holds_writer = False

    def _start_transaction_under_autocommit(self):
        timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        self.holds_writer = _writer.acquire(timeout=timeout)
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer()
            raise

    def _set_autocommit(self, autocommit):
        try:
            super()._set_autocommit(autocommit)
        finally:
            if autocommit:  # the transaction is over, committed or rolled back
                self._release_writer()

    def _close(self):
        try:
            super()._close()
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        if self.holds_writer:
            self.holds_writer = False
            _writer.release()
