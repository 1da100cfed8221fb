"""The embedded demo broker (kombu's SQLAlchemy transport on var/broker.sqlite3), prepared once
before the demo's processes start.

Two processes creating the broker's tables or the same queue row at once fail (kombu catches
neither "table already exists" nor the unique constraint on the queue name), so `rundemo`
creates both first, in one process. Delivered messages stay in the table as invisible rows
(kombu never deletes them); they are pruned here, at each start.
"""

from __future__ import annotations

from django.conf import settings
from kombu import Queue


def is_embedded() -> bool:
    return settings.CELERY_BROKER_URL.startswith("sqla+sqlite:")


def prepare(queues: tuple[str, ...] = ()) -> int:
    """Create the broker's tables and ``queues`` (default: the task queue); delete delivered
    messages. Returns how many were pruned. Does nothing for a broker with a server."""
    if not is_embedded():
        return 0
    from portal.celery import app

    names = queues or (settings.CELERY_TASK_DEFAULT_QUEUE,)
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for name in names:
            Queue(name, routing_key=name, channel=channel).declare()
        pruned = (
            channel.session.query(channel.message_cls)
            .filter(channel.message_cls.visible.is_(False))
            .delete(synchronize_session=False)
        )
        channel.session.commit()
    return pruned
