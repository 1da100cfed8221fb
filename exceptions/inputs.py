"""Approved exceptions as scheduling-engine inputs (imported by scheduling.snapshot)."""

from __future__ import annotations

import datetime as dt

from exceptions.models import ExceptionRequest, Kind, State


def reservations_for_cluster(cluster, now: dt.datetime) -> list:
    """Reservations the engine must honour on `cluster`: approved ones (so it clears capacity
    *before* the start, without cutting protected work) and active ones, until their end.
    One query."""
    from scheduling.engine.model import Reservation

    rows = (
        ExceptionRequest.objects.filter(
            kind=Kind.RESERVATION,
            cluster=cluster,
            state__in=[State.APPROVED, State.ACTIVE],
            ends_at__gt=now,
        )
        .select_related("node")
        .order_by("starts_at", "pk")
    )
    return [
        Reservation(
            id=f"exception-{r.pk}",
            cluster=cluster.name,
            gpus=r.gpus,
            start_s=r.starts_at.timestamp(),
            end_s=r.ends_at.timestamp(),
            project=r.node.slug_path if r.node_id else "",
        )
        for r in rows
    ]
