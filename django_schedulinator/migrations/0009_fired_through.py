# How far each schedule has fired (Schedule.fired_through), kept in its row so that no plan,
# re-plan or prune can fire an occurrence again; what retention deleted of each schedule's
# runs (PrunedRuns), which a backfill reads; and the constraint that no next run is at or
# before what fired; and the moves of occurrences a calendar change must not move again.

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery


def mark_what_fired(apps: Any, schema_editor: Any) -> None:
    """Each schedule's mark, from what the ledger still holds: the latest nominal time of
    an occurrence of its own timeline that it recorded (fired, buffered or skipped; not a
    run now, not a backfill) before its next run; and a finished one-off that ran, its
    run_at. What an earlier prune deleted cannot be read back: such a schedule starts from
    the runs that are left."""
    Schedule = apps.get_model("django_schedulinator", "Schedule")
    Run = apps.get_model("django_schedulinator", "Run")
    db = schema_editor.connection.alias
    schedules = Schedule.objects.using(db)
    latest = Run.objects.using(db).filter(schedule=OuterRef("pk"), trigger="schedule")
    schedules.filter(next_run_at__isnull=False).update(
        fired_through=Subquery(
            latest.filter(scheduled_for__lt=OuterRef("next_run_at"))
            .order_by("-scheduled_for")
            .values("scheduled_for")[:1]
        )
    )
    schedules.filter(next_run_at__isnull=True).update(
        fired_through=Subquery(latest.order_by("-scheduled_for").values("scheduled_for")[:1])
    )
    one_offs = schedules.filter(
        kind="once", next_run_at__isnull=True, run_count__gt=0, run_at__isnull=False
    )
    one_offs.filter(Q(fired_through__isnull=True) | Q(fired_through__lt=models.F("run_at"))).update(
        fired_through=models.F("run_at")
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0008_calendars"),
    ]

    operations = [
        migrations.CreateModel(
            name="PrunedRuns",
            fields=[
                (
                    "schedule",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="pruned_runs",
                        serialize=False,
                        to="django_schedulinator.schedule",
                        verbose_name="schedule",
                    ),
                ),
                (
                    "through",
                    models.DateTimeField(
                        help_text="The latest nominal time of a run retention deleted.",
                        verbose_name="pruned through",
                    ),
                ),
                ("runs", models.PositiveBigIntegerField(default=0, verbose_name="runs pruned")),
                ("pruned_at", models.DateTimeField(verbose_name="last pruned at")),
            ],
            options={
                "verbose_name": "pruned runs",
                "verbose_name_plural": "pruned runs",
            },
        ),
        migrations.AddField(
            model_name="schedule",
            name="fired_through",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text=(
                    "Every occurrence at or before this time has fired or was passed over; "
                    "none of them fires again."
                ),
                null=True,
                verbose_name="fired through",
            ),
        ),
        migrations.RunPython(mark_what_fired, migrations.RunPython.noop, elidable=True),
        migrations.AddField(
            model_name="schedule",
            name="decided_moves",
            field=models.JSONField(
                blank=True, default=list, editable=False, verbose_name="decided moves"
            ),
        ),
        migrations.AddConstraint(
            model_name="schedule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("next_run_at__isnull", True),
                    ("fired_through__isnull", True),
                    ("next_run_at__gt", models.F("fired_through")),
                    _connector="OR",
                ),
                name="schedulinator_next_after_fired",
            ),
        ),
    ]
