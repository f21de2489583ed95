# The tz database the next runs were computed with (ZoneRules), and the origin and the
# action of a re-plan after its rules changed.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0006_cron_union"),
    ]

    operations = [
        migrations.CreateModel(
            name="ZoneRules",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("version", models.CharField(max_length=32, verbose_name="version")),
                ("source", models.CharField(max_length=16, verbose_name="source")),
                ("location", models.CharField(blank=True, max_length=500, verbose_name="location")),
                ("start", models.DateTimeField(verbose_name="from")),
                ("end", models.DateTimeField(verbose_name="until")),
                ("offsets", models.JSONField(default=dict, verbose_name="offsets")),
                ("recorded_at", models.DateTimeField(verbose_name="recorded at")),
            ],
            options={
                "verbose_name": "time-zone rules",
                "verbose_name_plural": "time-zone rules",
            },
        ),
        migrations.AlterField(
            model_name="schedulechange",
            name="action",
            field=models.CharField(
                choices=[
                    ("created", "Created"),
                    ("changed", "Changed"),
                    ("deleted", "Deleted"),
                    ("paused", "Paused"),
                    ("resumed", "Resumed"),
                    ("run_now", "Run now"),
                    ("backfill", "Backfill"),
                    ("resynced", "Index resynced"),
                    ("replanned", "Re-planned"),
                ],
                max_length=16,
                verbose_name="action",
            ),
        ),
        migrations.AlterField(
            model_name="schedulechange",
            name="source",
            field=models.CharField(
                choices=[
                    ("admin", "Admin"),
                    ("api", "REST API"),
                    ("command", "Management command"),
                    ("scheduler", "Scheduler"),
                    ("python", "Python code"),
                    ("code", "Declared in code"),
                    ("tzdata", "Time-zone database"),
                ],
                max_length=16,
                verbose_name="source",
            ),
        ),
    ]
