"""``Schedule.updated_at`` takes the database's clock (``dbclock.DatabaseClockField``).

The column does not change: only how Django writes it. No SQL is run (SQLite would
otherwise copy the whole table for a change it cannot see).
"""

from django.db import migrations

import django_schedulinator.dbclock


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0004_admin_api_changelog"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="schedule",
                    name="updated_at",
                    field=django_schedulinator.dbclock.DatabaseClockField(),
                ),
            ],
        ),
    ]
