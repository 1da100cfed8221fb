"""POSIX account names match as a whole: `$` let "alice\n" through."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0009_job_fillfactor"),
    ]

    operations = [
        migrations.AlterField(
            model_name="posixaccount",
            name="name",
            field=models.CharField(
                max_length=32,
                unique=True,
                validators=[
                    django.core.validators.RegexValidator(
                        "\\A[a-z_][a-z0-9_-]{0,31}\\Z", "a POSIX user name: a-z, 0-9, _ and -"
                    ),
                    django.core.validators.RegexValidator(
                        "\\Aroot\\Z", "jobs never run as root", inverse_match=True
                    ),
                ],
            ),
        ),
    ]
