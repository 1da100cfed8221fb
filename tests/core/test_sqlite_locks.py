"""The keyed locks of a SQLite database (core/sqlite/locks.py), SQLite's stand-in for
PostgreSQL's advisory locks: held across threads and processes, gone with a dead holder."""

import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from core.sqlite import locks

ROOT = Path(__file__).resolve().parents[2]


def database(tmp_path):
    name = str(tmp_path / "db.sqlite3")
    return SimpleNamespace(settings_dict={"NAME": name}, is_in_memory_db=lambda: False)


def test_a_second_holder_of_a_key_in_another_thread_waits_for_the_first(tmp_path):
    connection, order = database(tmp_path), []

    def second():
        with locks.held(connection, "dispatch", 7):
            order.append("second")

    with locks.held(connection, "dispatch", 7):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        order.append("first")
    thread.join(timeout=10)
    assert order == ["first", "second"]
    assert (tmp_path / "db.sqlite3-locks" / "dispatch-07.lock").exists()


def test_keys_in_other_slots_and_other_namespaces_do_not_wait(tmp_path):
    connection, done = database(tmp_path), threading.Event()

    def others():
        with locks.held(connection, "dispatch", 8), locks.held(connection, "stop", 7):
            done.set()

    with locks.held(connection, "dispatch", 7):
        threading.Thread(target=others).start()
        assert done.wait(5)


def test_the_lock_of_a_killed_holder_is_free_again(tmp_path):
    script = (
        "import sys, time, types\n"
        "from core.sqlite import locks\n"
        f"c = types.SimpleNamespace(settings_dict={{'NAME': {str(tmp_path / 'db.sqlite3')!r}}},"
        " is_in_memory_db=lambda: False)\n"
        "with locks.held(c, 'dispatch', 7):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        taken = threading.Event()

        def take():
            with locks.held(database(tmp_path), "dispatch", 7 + locks.SLOTS):  # same slot
                taken.set()

        threading.Thread(target=take, daemon=True).start()
        assert not taken.wait(0.5)  # the other process holds it
        holder.kill()
        assert taken.wait(5)
    finally:
        holder.kill()
        holder.wait()
