"""The schema of the first release: the development versions' migrations, squashed into one
(docs/upgrading.md says what a database migrated by one of them needs: nothing, once it is
at the last of them)."""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import django_schedulinator.models.calendar
import django_schedulinator.models.dbclock
import django_schedulinator.models.validators


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Calendar",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.SlugField(
                        help_text="How schedules name it: letters, digits, - and _.",
                        max_length=100,
                        unique=True,
                        verbose_name="name",
                    ),
                ),
                (
                    "description",
                    models.CharField(blank=True, max_length=500, verbose_name="description"),
                ),
                (
                    "timezone",
                    models.CharField(
                        default=django_schedulinator.models.calendar.default_timezone,
                        help_text="IANA zone whose midnights start and end its days.",
                        max_length=64,
                        verbose_name="timezone",
                    ),
                ),
                (
                    "weekend",
                    models.JSONField(
                        blank=True,
                        default=django_schedulinator.models.calendar.default_weekend,
                        help_text="ISO weekdays (1 is Monday, 7 Sunday) that are not business days: an occurrence is never moved onto one.",
                        validators=[django_schedulinator.models.validators.validate_weekend],
                        verbose_name="weekend",
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("manual", "By hand"),
                            ("holidays", "Public holidays (the holidays package)"),
                            ("ical", "An iCalendar file"),
                        ],
                        default="manual",
                        max_length=16,
                        verbose_name="source",
                    ),
                ),
                (
                    "country",
                    models.CharField(
                        blank=True,
                        help_text="Public holidays: an ISO 3166 country code, such as GB or US.",
                        max_length=8,
                        verbose_name="country",
                    ),
                ),
                (
                    "subdivision",
                    models.CharField(
                        blank=True,
                        help_text="Public holidays: a region the holidays package knows, such as ENG or CA.",
                        max_length=16,
                        verbose_name="subdivision",
                    ),
                ),
                (
                    "stamp",
                    models.CharField(
                        default=django_schedulinator.models.calendar.new_stamp,
                        editable=False,
                        max_length=32,
                        verbose_name="stamp",
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
            ],
            options={
                "verbose_name": "calendar",
                "verbose_name_plural": "calendars",
                "ordering": ("name",),
            },
        ),
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
                        validators=[django_schedulinator.models.validators.validate_name],
                        verbose_name="name",
                    ),
                ),
                (
                    "task",
                    models.CharField(
                        help_text="A task registered with @django_schedulinator.task.",
                        max_length=200,
                        validators=[
                            django_schedulinator.models.validators.validate_registered_task
                        ],
                        verbose_name="task",
                    ),
                ),
                (
                    "args",
                    models.JSONField(
                        blank=True,
                        default=list,
                        validators=[django_schedulinator.models.validators.validate_json_list],
                        verbose_name="args",
                    ),
                ),
                (
                    "kwargs",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        validators=[django_schedulinator.models.validators.validate_json_object],
                        verbose_name="kwargs",
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("cron", "Cron"),
                            ("interval", "Interval"),
                            ("once", "One-off"),
                            ("solar", "Solar (sunrise, sunset, ...)"),
                        ],
                        default="cron",
                        max_length=16,
                        verbose_name="kind",
                    ),
                ),
                (
                    "cron",
                    models.CharField(
                        blank=True,
                        help_text="5 fields (minute hour day month weekday), an optional leading seconds field, or @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually. Several expressions separated by ; fire at each time any of them matches.",
                        max_length=1000,
                        verbose_name="cron",
                    ),
                ),
                (
                    "day_rule",
                    models.CharField(
                        choices=[
                            ("either", "Either may match (cron's rule)"),
                            ("both", "Both must match (Celery's rule)"),
                        ],
                        default="either",
                        help_text="Cron, when both the day of the month and the day of the week are restricted: '1-7 * 1' is every Monday and days 1-7 (either), or the first Monday (both).",
                        max_length=8,
                        verbose_name="day rule",
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
                    "solar_event",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("dawn_astronomical", "Astronomical dawn (-18°)"),
                            ("dawn_nautical", "Nautical dawn (-12°)"),
                            ("dawn_civil", "Civil dawn (-6°)"),
                            ("sunrise", "Sunrise"),
                            ("solar_noon", "Solar noon"),
                            ("sunset", "Sunset"),
                            ("dusk_civil", "Civil dusk (-6°)"),
                            ("dusk_nautical", "Nautical dusk (-12°)"),
                            ("dusk_astronomical", "Astronomical dusk (-18°)"),
                        ],
                        help_text="Solar: the event of the sun it fires at, each day it happens at the place (the polar night and the midnight sun pass days over).",
                        max_length=24,
                        verbose_name="solar event",
                    ),
                ),
                (
                    "latitude",
                    models.FloatField(
                        blank=True,
                        help_text="Solar: degrees north (negative: south), -90 to 90.",
                        null=True,
                        verbose_name="latitude",
                    ),
                ),
                (
                    "longitude",
                    models.FloatField(
                        blank=True,
                        help_text="Solar: degrees east (negative: west), -180 to 180.",
                        null=True,
                        verbose_name="longitude",
                    ),
                ),
                (
                    "solar_offset",
                    models.DurationField(
                        blank=True,
                        help_text="Solar: fire this long after the event (negative: before it), at most 12 hours either way; for example -00:30:00 for half an hour before sunset.",
                        null=True,
                        verbose_name="solar offset",
                    ),
                ),
                (
                    "timezone",
                    models.CharField(
                        default=django_schedulinator.models.calendar.default_timezone,
                        help_text="IANA zone in which the cron expression is evaluated, the previews are shown and the calendars' days are read.",
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
                    "calendars",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="Names of calendars of excluded days (holidays): no occurrence fires on them.",
                        validators=[django_schedulinator.models.validators.validate_calendar_names],
                        verbose_name="calendars",
                    ),
                ),
                (
                    "calendar_rule",
                    models.CharField(
                        choices=[
                            ("skip", "Skip it"),
                            ("next_business_day", "Move it to the next business day"),
                        ],
                        default="skip",
                        help_text="An occurrence on a day one of the calendars excludes is skipped, or moved to the same local time on the next business day.",
                        max_length=24,
                        verbose_name="on an excluded day",
                    ),
                ),
                (
                    "decided_moves",
                    models.JSONField(
                        blank=True, default=list, editable=False, verbose_name="decided moves"
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
                    "grace",
                    models.DurationField(
                        blank=True,
                        help_text="Raise a missed-run alert when an occurrence has no successful run this long after its nominal time (blank: no alert).",
                        null=True,
                        verbose_name="grace",
                    ),
                ),
                (
                    "dispatcher",
                    models.CharField(
                        default="default",
                        help_text="The alias in SCHEDULINATOR['DISPATCHERS'] that runs or hands off its occurrences.",
                        max_length=100,
                        verbose_name="dispatcher",
                    ),
                ),
                (
                    "dispatch_options",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text='What the dispatcher supports, such as {"queue": "reports", "priority": 5}.',
                        verbose_name="dispatch options",
                    ),
                ),
                (
                    "declared_in",
                    models.CharField(
                        blank=True,
                        editable=False,
                        help_text="Where the code declares this schedule; empty for one made by hand.",
                        max_length=300,
                        verbose_name="declared in",
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
                    "fired_through",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Every occurrence at or before this time has fired or was passed over; none of them fires again.",
                        null=True,
                        verbose_name="fired through",
                    ),
                ),
                (
                    "missed_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="The nominal time of the last occurrence that had no successful run within the grace.",
                        null=True,
                        verbose_name="missed",
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
                    django_schedulinator.models.dbclock.DatabaseClockField(
                        verbose_name="updated at"
                    ),
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
                            ("calendar", "Excluded day (calendar)"),
                        ],
                        max_length=16,
                        verbose_name="skip reason",
                    ),
                ),
                ("task", models.CharField(max_length=200, verbose_name="task")),
                ("args", models.JSONField(default=list, verbose_name="args")),
                ("kwargs", models.JSONField(default=dict, verbose_name="kwargs")),
                (
                    "dispatcher",
                    models.CharField(default="default", max_length=100, verbose_name="dispatcher"),
                ),
                (
                    "dispatch_options",
                    models.JSONField(default=dict, verbose_name="dispatch options"),
                ),
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
                (
                    "output",
                    models.TextField(
                        blank=True,
                        help_text="What the task returned as text (a management command: its exit status and output), its last 4,000 characters.",
                        verbose_name="output",
                    ),
                ),
                (
                    "external_id",
                    models.CharField(
                        blank=True,
                        help_text="The id the receiving system gave it: a task result id, a job id.",
                        max_length=255,
                        verbose_name="external id",
                    ),
                ),
                (
                    "response_status",
                    models.PositiveSmallIntegerField(
                        blank=True, null=True, verbose_name="response status"
                    ),
                ),
                (
                    "outcome_due_by",
                    models.DateTimeField(blank=True, null=True, verbose_name="outcome due by"),
                ),
                ("error", models.TextField(blank=True, verbose_name="error")),
                (
                    "note",
                    models.TextField(
                        blank=True,
                        help_text="Why it was skipped, or how it was queued.",
                        verbose_name="note",
                    ),
                ),
                ("alert_at", models.DateTimeField(blank=True, null=True, verbose_name="alert at")),
                (
                    "missed_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When the missed-run check found it had no success within the grace.",
                        null=True,
                        verbose_name="missed at",
                    ),
                ),
            ],
            options={
                "verbose_name": "run",
                "verbose_name_plural": "runs",
                "ordering": ("-scheduled_for",),
                "permissions": [
                    ("report_run", "Can report the outcome of handed-off runs (worker services)")
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
                            ("code", "Declared in code"),
                            ("tzdata", "Time-zone database"),
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
                            ("replanned", "Re-planned"),
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
            ],
            options={
                "verbose_name": "schedule change",
                "verbose_name_plural": "schedule changes",
                "ordering": ("-at", "-id"),
            },
        ),
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
        migrations.CreateModel(
            name="ExcludedDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField(verbose_name="day")),
                ("name", models.CharField(blank=True, max_length=200, verbose_name="name")),
                (
                    "calendar",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="days",
                        to="django_schedulinator.calendar",
                        verbose_name="calendar",
                    ),
                ),
            ],
            options={
                "verbose_name": "excluded day",
                "verbose_name_plural": "excluded days",
                "ordering": ("day",),
            },
        ),
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
                ("role", models.CharField(default="alone", max_length=16, verbose_name="role")),
                ("count", models.PositiveIntegerField(default=1, verbose_name="count")),
                ("since", models.DateTimeField(blank=True, null=True, verbose_name="since")),
                ("error", models.TextField(blank=True, verbose_name="error")),
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
        migrations.AddIndex(
            model_name="schedule",
            index=models.Index(fields=["updated_at", "id"], name="schedulinator_changed"),
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
        migrations.CreateModel(
            name="SchedulerOperations",
            fields=[],
            options={
                "verbose_name": "scheduler operations",
                "verbose_name_plural": "scheduler operations",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("django_schedulinator.schedule",),
        ),
        migrations.AddField(
            model_name="run",
            name="schedule",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="runs",
                to="django_schedulinator.schedule",
                verbose_name="schedule",
            ),
        ),
        migrations.AddField(
            model_name="schedulechange",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
                verbose_name="actor",
            ),
        ),
        migrations.AddField(
            model_name="schedulechange",
            name="schedule",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="changes",
                to="django_schedulinator.schedule",
                verbose_name="schedule",
            ),
        ),
        migrations.AddConstraint(
            model_name="excludedday",
            constraint=models.UniqueConstraint(
                fields=("calendar", "day"), name="schedulinator_day_once"
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status__in", ["pending", "running"])),
                fields=["lease_expires_at"],
                name="schedulinator_run_lease",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ["pending", "running", "buffered"]),
                    models.Q(("outcome_due_by__isnull", False), ("status", "dispatched")),
                    _connector="OR",
                ),
                fields=["schedule"],
                name="schedulinator_run_active",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("alert_at__isnull", False)),
                fields=["alert_at"],
                name="schedulinator_run_alert",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("missed_at__isnull", False)),
                fields=["id"],
                name="schedulinator_run_missed",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("external_id", ""), _negated=True),
                fields=["external_id"],
                name="schedulinator_run_external",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                fields=("schedule", "scheduled_for"), name="schedulinator_run_once"
            ),
        ),
        migrations.AddIndex(
            model_name="schedulechange",
            index=models.Index(fields=["schedule", "-at"], name="schedulinator_change_of"),
        ),
    ]
