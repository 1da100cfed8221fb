"""The zero-server broker under load: concurrent producers and one consumer, each in its own
process, all on the broker the demo uses (no REDIS_URL). Nothing lost, nothing delivered twice,
nothing half-written: kombu's filesystem transport let the demo's worker read a message file
still being written, and the worker died on a JSONDecodeError."""

import json
import multiprocessing
import os
import time

PRODUCERS = 6
PER_PRODUCER = 150
PAD = "x" * 20_000  # large bodies: a torn write would show


def _demo_broker(var_dir):
    os.environ["ALLOT_VAR_DIR"] = str(var_dir)
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    from kombu import Queue

    from portal.celery import app

    return app, Queue("load", routing_key="load")


def _prepare(var_dir) -> None:
    _demo_broker(var_dir)
    import django

    django.setup()
    from portal import broker

    broker.prepare(("load",))


def _produce(var_dir, producer: int) -> None:
    app, queue_spec = _demo_broker(var_dir)
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(queue_spec)
        for i in range(PER_PRODUCER):
            queue.put({"producer": producer, "i": i, "pad": PAD, "check": f"{producer}:{i}"})
        queue.close()


def _consume(var_dir, expected: int, out: str) -> None:
    app, queue_spec = _demo_broker(var_dir)
    seen: dict[str, int] = {}
    torn = 0
    deadline = time.monotonic() + 150
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(queue_spec)
        while len(seen) < expected and time.monotonic() < deadline:
            try:
                message = queue.get(timeout=1)  # consumes while the producers still write
            except queue.Empty:
                continue
            body = message.payload  # a torn message would fail to decode here
            if body["pad"] != PAD or body["check"] != f"{body['producer']}:{body['i']}":
                torn += 1
            key = body["check"]
            seen[key] = seen.get(key, 0) + 1
            message.ack()
        queue.close()
    with open(out, "w") as f:
        json.dump({"url": app.conf.broker_url, "seen": seen, "torn": torn}, f)


def test_the_demo_broker_delivers_every_message_whole_and_once_under_concurrent_producers(
    tmp_path,
):
    ctx = multiprocessing.get_context("spawn")
    var, out = tmp_path / "var", str(tmp_path / "seen.json")
    total = PRODUCERS * PER_PRODUCER
    consumer = ctx.Process(target=_consume, args=(var, total, out))
    producers = [ctx.Process(target=_produce, args=(var, p)) for p in range(PRODUCERS)]
    prepare = ctx.Process(target=_prepare, args=(var,))  # as rundemo does before its children
    prepare.start()
    prepare.join(timeout=60)
    assert prepare.exitcode == 0
    started = time.monotonic()
    for process in [consumer, *producers]:
        process.start()
    for process in [*producers, consumer]:
        process.join(timeout=180)
        assert process.exitcode == 0
    elapsed = time.monotonic() - started
    result = json.loads(open(out).read())
    assert result["url"].startswith("sqla+sqlite:")  # the demo's default, no server
    assert result["torn"] == 0  # nothing half-written
    assert len(result["seen"]) == total  # nothing lost
    assert set(result["seen"].values()) == {1}  # nothing delivered twice
    print(f"{total} messages from {PRODUCERS} producers in {elapsed:.1f} s")
