"""The alerts' streaks (issue 35, item 10): what each outbox entry is in its schedule's
streak of alerts (``role``, ``count``, ``since``) and the error it tells of, and the open
streak of each schedule and event (``AlertStreak``). New columns have defaults or are
nullable: existing rows need nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0002_solar"),
    ]

    operations = [
        migrations.AddField(
            model_name="notification",
            name="count",
            field=models.PositiveIntegerField(default=1, verbose_name="count"),
        ),
        migrations.AddField(
            model_name="notification",
            name="error",
            field=models.TextField(blank=True, verbose_name="error"),
        ),
        migrations.AddField(
            model_name="notification",
            name="role",
            field=models.CharField(default="alone", max_length=16, verbose_name="role"),
        ),
        migrations.AddField(
            model_name="notification",
            name="since",
            field=models.DateTimeField(blank=True, null=True, verbose_name="since"),
        ),
        migrations.CreateModel(
            name="AlertStreak",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("schedule_id", models.BigIntegerField(verbose_name="schedule id")),
                ("kind", models.CharField(max_length=16, verbose_name="kind")),
                ("first_at", models.DateTimeField(verbose_name="first at")),
                ("last_at", models.DateTimeField(verbose_name="last at")),
                ("count", models.PositiveIntegerField(default=1, verbose_name="count")),
                ("told_at", models.DateTimeField(verbose_name="told at")),
                ("told", models.PositiveIntegerField(default=1, verbose_name="told")),
                ("opened_at", models.DateTimeField(verbose_name="opened at")),
                ("ended_at", models.DateTimeField(blank=True, null=True, verbose_name="ended at")),
            ],
            options={
                "verbose_name": "alert streak",
                "verbose_name_plural": "alert streaks",
                "ordering": ("-id",),
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("ended_at__isnull", True)),
                        fields=("schedule_id", "kind"),
                        name="schedulinator_streak_open",
                    )
                ],
            },
        ),
    ]
