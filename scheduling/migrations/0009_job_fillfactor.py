"""Fill only 40 % of each page of the job table on PostgreSQL, so that a pass's report
(reason, position, estimate of every waiting job; no indexed column) is written as heap-only
updates beside the old row versions instead of new entries in all eight indexes of the table
(docs/benchmarks.md, "The live loop"). New pages follow at once; pages written before keep
their fill until the table is rewritten (``VACUUM FULL scheduling_job``, at a quiet moment).
At 50 % a row whose
report grew (a longer reason) no longer fitted beside its old version on a fresh page (71 %
heap-only in the test); at 40 % they all do. The price: the table takes 2.5 times the space.
SQLite has no fill factor: nothing to do there."""

from django.db import migrations

FILLFACTOR = 40


def _alter(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0008_page_indexes")]

    operations = [
        migrations.RunPython(
            _alter(f"ALTER TABLE scheduling_job SET (fillfactor = {FILLFACTOR})"),
            _alter("ALTER TABLE scheduling_job RESET (fillfactor)"),
        )
    ]
