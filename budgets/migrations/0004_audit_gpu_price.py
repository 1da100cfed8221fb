from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('budgets', '0003_audit_role_actions'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='auditentry',
            name='audit_action_known',
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='action',
            field=models.CharField(choices=[('set_grant', 'Set grant'), ('transfer', 'Transfer'), ('set_weight', 'Set weight'), ('create', 'Create'), ('rename', 'Rename'), ('move', 'Move'), ('archive', 'Archive'), ('grant_role', 'Grant role'), ('revoke_role', 'Revoke role'), ('set_price', 'Set GPU price')], max_length=20),
        ),
        migrations.AddConstraint(
            model_name='auditentry',
            constraint=models.CheckConstraint(condition=models.Q(('action__in', ['set_grant', 'transfer', 'set_weight', 'create', 'rename', 'move', 'archive', 'grant_role', 'revoke_role', 'set_price'])), name='audit_action_known'),
        ),
    ]
