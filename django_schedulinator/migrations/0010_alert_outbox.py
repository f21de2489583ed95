# The outbox of missed-run notifications (Notification): an entry per miss per notifier,
# written with the mark of the miss, until the notifier accepted it (issue 32).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0009_fired_through"),
    ]

    operations = [
        migrations.CreateModel(
            name="Notification",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("notifier", models.CharField(max_length=200, verbose_name="notifier")),
                ("kind", models.CharField(default="missed", max_length=16, verbose_name="kind")),
                ("schedule_id", models.BigIntegerField(verbose_name="schedule id")),
                ("scheduled_for", models.DateTimeField(verbose_name="scheduled for")),
                ("run_id", models.BigIntegerField(blank=True, null=True, verbose_name="run id")),
                ("reason", models.CharField(max_length=32, verbose_name="reason")),
                ("grace", models.DurationField(blank=True, null=True, verbose_name="grace")),
                ("raised_at", models.DateTimeField(verbose_name="raised at")),
                (
                    "next_attempt_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="next attempt at"),
                ),
                ("attempts", models.PositiveIntegerField(default=0, verbose_name="attempts")),
                (
                    "claimed_by",
                    models.CharField(blank=True, max_length=40, verbose_name="claimed by"),
                ),
                (
                    "claimed_until",
                    models.DateTimeField(blank=True, null=True, verbose_name="claimed until"),
                ),
                ("message", models.CharField(blank=True, max_length=200, verbose_name="message")),
                ("last_error", models.TextField(blank=True, verbose_name="last error")),
                (
                    "delivered_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="delivered at"),
                ),
            ],
            options={
                "verbose_name": "notification",
                "verbose_name_plural": "notifications",
                "ordering": ("-id",),
                "indexes": [
                    models.Index(
                        condition=models.Q(("delivered_at__isnull", True)),
                        fields=["notifier", "id"],
                        name="schedulinator_note_pending",
                    ),
                    models.Index(
                        condition=models.Q(("delivered_at__isnull", False)),
                        fields=["delivered_at"],
                        name="schedulinator_note_delivered",
                    ),
                ],
            },
        ),
    ]
