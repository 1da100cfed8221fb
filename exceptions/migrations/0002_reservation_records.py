"""Approved and active reservation requests get the scheduler-owned record the engine now
reads (scheduling.Reservation), so an upgrade keeps every held window."""

from django.db import migrations


def forwards(apps, schema_editor):
    ExceptionRequest = apps.get_model("exceptions", "ExceptionRequest")
    Reservation = apps.get_model("scheduling", "Reservation")
    rows = ExceptionRequest.objects.filter(
        kind="reservation", state__in=["approved", "active"], cluster__isnull=False
    )
    for r in rows:
        Reservation.objects.update_or_create(
            ref=f"exception-{r.pk}",
            defaults=dict(
                cluster_id=r.cluster_id,
                project_id=r.node_id,
                gpus=r.gpus,
                starts_at=r.starts_at,
                ends_at=r.ends_at,
                source=f"exception #{r.pk}",
            ),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("exceptions", "0001_initial"),
        ("scheduling", "0004_funding_end_and_reservations"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
