"""The demo's SQLite backend (core/sqlite): many threads of one process writing at once each
get the write lock in turn. With SQLite's busy handler alone some waited out the whole timeout
while others kept winning ("database is locked"); a 1 s timeout and 16 threads show it.

Run in a `manage.py shell` of its own on a SQLite file (the suite's database is PostgreSQL)."""

import json
import os
import subprocess
import sys

SCRIPT = """
import json, threading, time
from django.db import connection, connections, transaction

connection.settings_dict["OPTIONS"]["timeout"] = 1
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE tally (n INTEGER)")
failures, waits = [], []

def writer():
    for _ in range(25):
        began = time.monotonic()
        try:
            with transaction.atomic():
                waits.append(time.monotonic() - began)
                with connection.cursor() as cursor:
                    cursor.execute("INSERT INTO tally VALUES (1)")
                time.sleep(0.01)  # a transaction's work, slowed by 15 other threads
        except Exception as exc:
            failures.append(repr(exc))
    connection.close()

threads = [threading.Thread(target=writer) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
with connection.cursor() as cursor:
    cursor.execute("SELECT COUNT(*) FROM tally")
    rows = cursor.fetchone()[0]
print(json.dumps({"backend": type(connections["default"]).__module__, "failures": failures[:3],
                  "failed": len(failures), "rows": rows, "max_wait_s": max(waits)}))
"""


def test_many_threads_writing_at_once_on_sqlite_all_get_their_turn(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env |= {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "ALLOT_VAR_DIR": str(tmp_path / "var"), "DEBUG": "1"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SCRIPT],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["backend"] == "core.sqlite.base"
    assert report["failed"] == 0, report["failures"]
    assert report["rows"] == 16 * 25


def test_the_write_lock_goes_to_its_waiters_in_arrival_order_and_a_wait_can_run_out():
    import threading
    import time

    from core.sqlite.base import FairLock

    lock, order = FairLock(), []
    assert lock.acquire(timeout=1)

    def waiter(name):
        assert lock.acquire(timeout=10)
        order.append(name)
        lock.release()

    threads = []
    for name in range(5):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        time.sleep(0.05)  # each is waiting before the next arrives
    assert lock.acquire(timeout=0.05) is False  # still held: the wait runs out
    lock.release()
    for thread in threads:
        thread.join()
    assert order == [0, 1, 2, 3, 4]
    assert lock.acquire(timeout=0) and not lock.release()  # free again
