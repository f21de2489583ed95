"""The app's tables. The development versions' migrations 0001-0005 were squashed into this
one before the first release; their schema is the same (docs/upgrading.md)."""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import django_schedulinator.dbclock
import django_schedulinator.models
import django_schedulinator.validators


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        max_length=200,
                        unique=True,
                        validators=[django_schedulinator.validators.validate_name],
                        verbose_name="name",
                    ),
                ),
                (
                    "task",
                    models.CharField(
                        help_text="A task registered with @django_schedulinator.task.",
                        max_length=200,
                        validators=[django_schedulinator.validators.validate_registered_task],
                        verbose_name="task",
                    ),
                ),
                (
                    "args",
                    models.JSONField(
                        blank=True,
                        default=list,
                        validators=[django_schedulinator.validators.validate_json_list],
                        verbose_name="args",
                    ),
                ),
                (
                    "kwargs",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        validators=[django_schedulinator.validators.validate_json_object],
                        verbose_name="kwargs",
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("cron", "Cron"), ("interval", "Interval"), ("once", "One-off")],
                        default="cron",
                        max_length=16,
                        verbose_name="kind",
                    ),
                ),
                (
                    "cron",
                    models.CharField(
                        blank=True,
                        help_text="5 fields (minute hour day month weekday), an optional leading seconds field, or @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually.",
                        max_length=200,
                        verbose_name="cron",
                    ),
                ),
                ("interval", models.DurationField(blank=True, null=True, verbose_name="interval")),
                (
                    "run_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When a one-off runs.",
                        null=True,
                        verbose_name="run at",
                    ),
                ),
                (
                    "timezone",
                    models.CharField(
                        default=django_schedulinator.models.default_timezone,
                        help_text="IANA zone in which the cron expression is evaluated.",
                        max_length=64,
                        verbose_name="timezone",
                    ),
                ),
                (
                    "dst_gap",
                    models.CharField(
                        choices=[
                            ("shift", "Shift it forward by the gap (02:30 runs at 03:30)"),
                            ("skip", "Skip it"),
                        ],
                        default="shift",
                        help_text="Cron: the clocks spring forward over it (02:30 when 02:00 jumps to 03:00).",
                        max_length=8,
                        verbose_name="when a local time does not exist",
                    ),
                ),
                (
                    "dst_fold",
                    models.CharField(
                        choices=[
                            ("first", "Run at the first"),
                            ("second", "Run at the second"),
                            ("both", "Run at both"),
                        ],
                        default="first",
                        help_text="Cron: the clocks fall back over it (01:30 when 02:00 goes back to 01:00).",
                        max_length=8,
                        verbose_name="when a local time occurs twice",
                    ),
                ),
                (
                    "anchor_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="Interval: fire at this time plus whole intervals (default: the start, else when the timing was set).",
                        null=True,
                        verbose_name="anchor at",
                    ),
                ),
                (
                    "start_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="No occurrence before this time (cron and interval).",
                        null=True,
                        verbose_name="start at",
                    ),
                ),
                (
                    "end_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="No occurrence after this time; the schedule then leaves the index.",
                        null=True,
                        verbose_name="end at",
                    ),
                ),
                (
                    "max_runs",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Finish after this many runs.",
                        null=True,
                        validators=[django.core.validators.MinValueValidator(1)],
                        verbose_name="max runs",
                    ),
                ),
                (
                    "jitter",
                    models.DurationField(
                        blank=True,
                        help_text="Delay each occurrence by up to this much (the same delay on every re-dispatch, never past the next occurrence) to spread load.",
                        null=True,
                        verbose_name="jitter",
                    ),
                ),
                (
                    "catch_up",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("latest", "Fire the latest missed occurrence once"),
                            ("skip", "Skip missed occurrences"),
                            ("all", "Fire all missed within the catch-up window"),
                        ],
                        help_text="What fires after downtime; blank: SCHEDULINATOR['CATCH_UP'] (latest).",
                        max_length=8,
                        verbose_name="catch up",
                    ),
                ),
                (
                    "catch_up_window",
                    models.DurationField(
                        blank=True,
                        help_text="Catch-up 'all': missed occurrences older than this do not fire (blank: SCHEDULINATOR['CATCH_UP_WINDOW_SECONDS']).",
                        null=True,
                        verbose_name="catch up window",
                    ),
                ),
                (
                    "overlap",
                    models.CharField(
                        choices=[
                            ("allow", "Allow: runs may overlap"),
                            ("skip", "Skip while the previous run is still running"),
                            ("buffer", "Buffer one: run it when the previous run ends"),
                        ],
                        default="allow",
                        max_length=8,
                        verbose_name="overlap",
                    ),
                ),
                (
                    "enabled",
                    models.BooleanField(
                        default=True,
                        help_text="Clear it to pause the schedule; its missed runs are skipped.",
                        verbose_name="enabled",
                    ),
                ),
                (
                    "pause_note",
                    models.CharField(
                        blank=True,
                        help_text="Why the schedule is paused.",
                        max_length=500,
                        verbose_name="pause note",
                    ),
                ),
                (
                    "pause_after_failures",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Pause the schedule after this many failed runs in a row.",
                        null=True,
                        validators=[django.core.validators.MinValueValidator(1)],
                        verbose_name="pause after failures",
                    ),
                ),
                (
                    "next_run_at",
                    models.DateTimeField(
                        blank=True,
                        db_index=True,
                        editable=False,
                        help_text="The nominal time of the next occurrence (kept while paused).",
                        null=True,
                        verbose_name="next run at",
                    ),
                ),
                (
                    "due_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When the next occurrence fires: next_run_at plus its jitter.",
                        null=True,
                        verbose_name="due at",
                    ),
                ),
                (
                    "last_run_at",
                    models.DateTimeField(
                        blank=True, editable=False, null=True, verbose_name="last run at"
                    ),
                ),
                (
                    "run_count",
                    models.PositiveBigIntegerField(
                        default=0, editable=False, verbose_name="run count"
                    ),
                ),
                (
                    "failure_streak",
                    models.PositiveIntegerField(
                        default=0, editable=False, verbose_name="failure streak"
                    ),
                ),
                (
                    "paused_at",
                    models.DateTimeField(
                        blank=True, editable=False, null=True, verbose_name="paused at"
                    ),
                ),
                (
                    "revision",
                    models.PositiveBigIntegerField(
                        default=1, editable=False, verbose_name="revision"
                    ),
                ),
                (
                    "version",
                    models.PositiveBigIntegerField(
                        default=1,
                        editable=False,
                        help_text="Bumped by every change of the schedule's settings; send it back with an update so that a stale edit is refused instead of overwriting a newer one.",
                        verbose_name="version",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                (
                    "updated_at",
                    django_schedulinator.dbclock.DatabaseClockField(verbose_name="updated at"),
                ),
            ],
            options={
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
                "ordering": ("name",),
                "permissions": [
                    (
                        "view_operations",
                        "Can view the scheduler's operations page and index health",
                    ),
                    ("rebuild_index", "Can rebuild the due index"),
                ],
                "indexes": [
                    models.Index(fields=["updated_at", "id"], name="schedulinator_changed")
                ],
            },
        ),
        migrations.CreateModel(
            name="Run",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "scheduled_for",
                    models.DateTimeField(
                        help_text="The nominal time of the occurrence.",
                        verbose_name="scheduled for",
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("running", "Running"),
                            ("buffered", "Buffered"),
                            ("dispatched", "Dispatched"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("skipped", "Skipped"),
                        ],
                        default="pending",
                        max_length=16,
                        verbose_name="status",
                    ),
                ),
                (
                    "trigger",
                    models.CharField(
                        choices=[
                            ("schedule", "Schedule"),
                            ("run_now", "Run now"),
                            ("backfill", "Backfill"),
                        ],
                        default="schedule",
                        max_length=16,
                        verbose_name="trigger",
                    ),
                ),
                (
                    "skip_reason",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("missed", "Missed (catch-up policy)"),
                            ("expired", "Expired (a one-off too late)"),
                            ("dst", "Local time does not exist (DST policy)"),
                            ("overlap", "Previous run still running (overlap policy)"),
                            ("paused", "Schedule paused"),
                            ("replaced", "Replaced by a run now"),
                        ],
                        max_length=16,
                        verbose_name="skip reason",
                    ),
                ),
                ("task", models.CharField(max_length=200, verbose_name="task")),
                ("args", models.JSONField(default=list, verbose_name="args")),
                ("kwargs", models.JSONField(default=dict, verbose_name="kwargs")),
                ("claimed_at", models.DateTimeField(verbose_name="claimed at")),
                (
                    "dispatched_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="dispatched at"),
                ),
                (
                    "finished_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="finished at"),
                ),
                ("worker_id", models.CharField(max_length=200, verbose_name="worker id")),
                ("claim_token", models.CharField(max_length=40, verbose_name="claim token")),
                (
                    "lease_expires_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="lease expires at"),
                ),
                ("attempts", models.PositiveIntegerField(default=1, verbose_name="attempts")),
                ("error", models.TextField(blank=True, verbose_name="error")),
                (
                    "note",
                    models.TextField(
                        blank=True,
                        help_text="Why it was skipped, or how it was queued.",
                        verbose_name="note",
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="django_schedulinator.schedule",
                        verbose_name="schedule",
                    ),
                ),
            ],
            options={
                "verbose_name": "run",
                "verbose_name_plural": "runs",
                "ordering": ("-scheduled_for",),
                "indexes": [
                    models.Index(
                        condition=models.Q(("status__in", ["pending", "running"])),
                        fields=["lease_expires_at"],
                        name="schedulinator_run_lease",
                    ),
                    models.Index(
                        condition=models.Q(("status__in", ["pending", "running", "buffered"])),
                        fields=["schedule"],
                        name="schedulinator_run_active",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("schedule", "scheduled_for"), name="schedulinator_run_once"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ScheduleChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("schedule_name", models.CharField(max_length=200, verbose_name="schedule name")),
                (
                    "actor_name",
                    models.CharField(blank=True, max_length=150, verbose_name="actor name"),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("admin", "Admin"),
                            ("api", "REST API"),
                            ("command", "Management command"),
                            ("scheduler", "Scheduler"),
                            ("python", "Python code"),
                        ],
                        max_length=16,
                        verbose_name="source",
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("created", "Created"),
                            ("changed", "Changed"),
                            ("deleted", "Deleted"),
                            ("paused", "Paused"),
                            ("resumed", "Resumed"),
                            ("run_now", "Run now"),
                            ("backfill", "Backfill"),
                            ("resynced", "Index resynced"),
                        ],
                        max_length=16,
                        verbose_name="action",
                    ),
                ),
                ("changes", models.JSONField(blank=True, default=dict, verbose_name="changes")),
                (
                    "version",
                    models.PositiveBigIntegerField(
                        blank=True,
                        help_text="The schedule's version after the change.",
                        null=True,
                        verbose_name="version",
                    ),
                ),
                (
                    "at",
                    models.DateTimeField(
                        db_index=True, default=django.utils.timezone.now, verbose_name="at"
                    ),
                ),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="actor",
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="changes",
                        to="django_schedulinator.schedule",
                        verbose_name="schedule",
                    ),
                ),
            ],
            options={
                "verbose_name": "schedule change",
                "verbose_name_plural": "schedule changes",
                "ordering": ("-at", "-id"),
                "indexes": [
                    models.Index(fields=["schedule", "-at"], name="schedulinator_change_of")
                ],
            },
        ),
    ]
