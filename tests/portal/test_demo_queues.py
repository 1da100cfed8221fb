"""The demo consumes every queue Allot sends to: the passes' and the previews'. Previews run in
a worker process of their own, so a replay (pure Python, holding the GIL) never delays a pass."""

from pathlib import Path

from django.conf import settings

from portal.management.commands.rundemo import commands


def _queues(command: list[str]) -> set[str]:
    if "worker" not in command:
        return set()
    return set(command[command.index("--queues") + 1].split(","))


def test_the_demo_workers_listen_on_the_pass_queue_and_the_preview_queue():
    children = commands("python", "127.0.0.1", 8000, Path("/tmp/var"))
    by_child = {name: _queues(command) for name, command in children.items()}

    assert set().union(*by_child.values()) >= {
        settings.CELERY_TASK_DEFAULT_QUEUE,
        settings.ALLOT_WHATIF_QUEUE,
    }
    passes = [name for name, q in by_child.items() if settings.CELERY_TASK_DEFAULT_QUEUE in q]
    assert all(settings.ALLOT_WHATIF_QUEUE not in by_child[name] for name in passes)


def test_the_two_demo_workers_have_distinct_node_names():
    children = commands("python", "127.0.0.1", 8000, Path("/tmp/var"))
    names = [c[c.index("--hostname") + 1] for c in children.values() if "worker" in c]
    assert len(names) == len(set(names)) == 2
