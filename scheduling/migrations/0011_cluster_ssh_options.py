"""A stored ``command_prefix`` becomes the structured ssh options the backend builds its ssh
command line from (scheduling/backends/ssh.py). One that is more than plain ssh is left as it
is: the backend refuses it, and the cluster shows why until an admin sets ssh_host."""

from django.db import migrations


def to_ssh_options(apps, schema_editor):
    from scheduling.backends.base import BackendError
    from scheduling.backends.ssh import parse_legacy_prefix

    Cluster = apps.get_model("scheduling", "Cluster")
    for cluster in Cluster.objects.exclude(options={}):
        prefix = str((cluster.options or {}).get("command_prefix") or "").strip()
        if not prefix:
            continue
        try:
            parsed = parse_legacy_prefix(prefix)
        except BackendError:
            continue
        options = {k: v for k, v in cluster.options.items() if k != "command_prefix"}
        cluster.options = {**options, **parsed}
        cluster.save(update_fields=["options"])


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0010_posix_name_whole_match")]

    operations = [migrations.RunPython(to_ssh_options, migrations.RunPython.noop)]
