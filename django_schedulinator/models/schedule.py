"""A schedule: the canonical row, the one truth of when it fires.

Longer than the package's other modules, as one subject: the fields (half of it, each with
its help text: they are the admin's and the API's documentation), the rules of the row
itself (``clean``), what ``save()`` keeps from harm whoever saves, and the questions asked
of the row's timing (``first_run_at``, ``next_after``, ``resume_plan``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from datetime import date, datetime, timedelta
from typing import Any, ClassVar

from django.core import validators
from django.core.exceptions import ValidationError
from django.db import models, router, transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index import clock
from django_schedulinator.models.calendar import Calendar, day_calendar, default_timezone
from django_schedulinator.models.dbclock import DatabaseClockField
from django_schedulinator.models.querysets import (
    COUNTERS,
    ScheduleQuerySet,
    counters_moved,
)
from django_schedulinator.models.validators import (
    StrOrPromise,
    grace_errors,
    json_too_deep,
    json_too_deep_error,
    payload_errors,
    validate_calendar_names,
    validate_json_list,
    validate_json_object,
    validate_name,
    validate_registered_task,
)
from django_schedulinator.registry import registry
from django_schedulinator.timing.days import LoadedCalendar

# The dispatcher alias a schedule names unless it says otherwise: dispatch.DEFAULT_ALIAS,
# spelled here because a row does not know the dispatchers (a test holds the two together).
DEFAULT_DISPATCHER = "default"


# What save() says of a write that would leave a schedule inconsistent (transition_errors).
NO_FIRST_RUN = _(
    "A new schedule needs its first run decided, and save() reads no clock: create it with "
    "django_schedulinator.services.create(), or call set_first_run(now) before save()."
)
NOT_RETIMED = _(
    "The timing changed (%(fields)s) and the next run did not move with it: change it with "
    "django_schedulinator.services.update(), which moves it, or set next_run_at too."
)
NOT_PAUSED = _(
    "A paused schedule records when it was paused: pause it with "
    "django_schedulinator.services.pause(), or set paused_at too."
)
NOT_RESUMED = _(
    "Resuming decides what becomes of the paused period: resume it with "
    "django_schedulinator.services.resume(), or clear paused_at and move next_run_at past "
    "now yourself (a next run left in the past fires under the catch-up policy)."
)


class Schedule(models.Model):
    class Kind(models.TextChoices):
        CRON = timing.Kind.CRON, _("Cron")
        INTERVAL = timing.Kind.INTERVAL, _("Interval")
        ONCE = timing.Kind.ONCE, _("One-off")
        SOLAR = timing.Kind.SOLAR, _("Solar (sunrise, sunset, ...)")

    class SolarEvent(models.TextChoices):
        DAWN_ASTRONOMICAL = timing.SolarEvent.DAWN_ASTRONOMICAL, _("Astronomical dawn (-18°)")
        DAWN_NAUTICAL = timing.SolarEvent.DAWN_NAUTICAL, _("Nautical dawn (-12°)")
        DAWN_CIVIL = timing.SolarEvent.DAWN_CIVIL, _("Civil dawn (-6°)")
        SUNRISE = timing.SolarEvent.SUNRISE, _("Sunrise")
        SOLAR_NOON = timing.SolarEvent.SOLAR_NOON, _("Solar noon")
        SUNSET = timing.SolarEvent.SUNSET, _("Sunset")
        DUSK_CIVIL = timing.SolarEvent.DUSK_CIVIL, _("Civil dusk (-6°)")
        DUSK_NAUTICAL = timing.SolarEvent.DUSK_NAUTICAL, _("Nautical dusk (-12°)")
        DUSK_ASTRONOMICAL = timing.SolarEvent.DUSK_ASTRONOMICAL, _("Astronomical dusk (-18°)")

    class DstGap(models.TextChoices):
        SHIFT = timing.DstGap.SHIFT, _("Shift it forward by the gap (02:30 runs at 03:30)")
        SKIP = timing.DstGap.SKIP, _("Skip it")

    class DstFold(models.TextChoices):
        FIRST = timing.DstFold.FIRST, _("Run at the first")
        SECOND = timing.DstFold.SECOND, _("Run at the second")
        BOTH = timing.DstFold.BOTH, _("Run at both")

    class DayRule(models.TextChoices):
        EITHER = timing.DayRule.EITHER, _("Either may match (cron's rule)")
        BOTH = timing.DayRule.BOTH, _("Both must match (Celery's rule)")

    class CalendarRule(models.TextChoices):
        SKIP = timing.CalendarRule.SKIP, _("Skip it")
        MOVE = timing.CalendarRule.MOVE, _("Move it to the next business day")

    class CatchUp(models.TextChoices):
        LATEST = timing.CatchUpMode.LATEST, _("Fire the latest missed occurrence once")
        SKIP = timing.CatchUpMode.SKIP, _("Skip missed occurrences")
        ALL = timing.CatchUpMode.ALL, _("Fire all missed within the catch-up window")

    class Overlap(models.TextChoices):
        ALLOW = timing.Overlap.ALLOW, _("Allow: runs may overlap")
        SKIP = timing.Overlap.SKIP, _("Skip while the previous run is still running")
        BUFFER = timing.Overlap.BUFFER, _("Buffer one: run it when the previous run ends")

    name = models.CharField(_("name"), max_length=200, unique=True, validators=[validate_name])
    task = models.CharField(
        _("task"),
        max_length=200,
        validators=[validate_registered_task],
        help_text=_("A task registered with @django_schedulinator.task."),
    )
    args = models.JSONField(_("args"), default=list, blank=True, validators=[validate_json_list])
    kwargs = models.JSONField(
        _("kwargs"), default=dict, blank=True, validators=[validate_json_object]
    )
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(
        _("cron"),
        max_length=timing.MAX_CRON_TEXT_LENGTH,
        blank=True,
        help_text=_(
            "5 fields (minute hour day month weekday), an optional leading seconds "
            "field, or @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually. "
            "Several expressions separated by ; fire at each time any of them matches."
        ),
    )
    day_rule = models.CharField(
        _("day rule"),
        max_length=8,
        choices=DayRule.choices,
        default=DayRule.EITHER,
        help_text=_(
            "Cron, when both the day of the month and the day of the week are restricted: "
            "'1-7 * 1' is every Monday and days 1-7 (either), or the first Monday (both)."
        ),
    )
    interval = models.DurationField(_("interval"), null=True, blank=True)
    run_at = models.DateTimeField(
        _("run at"), null=True, blank=True, help_text=_("When a one-off runs.")
    )
    solar_event = models.CharField(
        _("solar event"),
        max_length=24,
        choices=SolarEvent.choices,
        blank=True,
        help_text=_(
            "Solar: the event of the sun it fires at, each day it happens at the place (the "
            "polar night and the midnight sun pass days over)."
        ),
    )
    latitude = models.FloatField(
        _("latitude"),
        null=True,
        blank=True,
        help_text=_("Solar: degrees north (negative: south), -90 to 90."),
    )
    longitude = models.FloatField(
        _("longitude"),
        null=True,
        blank=True,
        help_text=_("Solar: degrees east (negative: west), -180 to 180."),
    )
    solar_offset = models.DurationField(
        _("solar offset"),
        null=True,
        blank=True,
        help_text=_(
            "Solar: fire this long after the event (negative: before it), at most 12 hours "
            "either way; for example -00:30:00 for half an hour before sunset."
        ),
    )
    timezone = models.CharField(
        _("timezone"),
        max_length=64,
        default=default_timezone,
        help_text=_(
            "IANA zone in which the cron expression is evaluated, the previews are shown "
            "and the calendars' days are read."
        ),
    )
    dst_gap = models.CharField(
        _("when a local time does not exist"),
        max_length=8,
        choices=DstGap.choices,
        default=DstGap.SHIFT,
        help_text=_("Cron: the clocks spring forward over it (02:30 when 02:00 jumps to 03:00)."),
    )
    dst_fold = models.CharField(
        _("when a local time occurs twice"),
        max_length=8,
        choices=DstFold.choices,
        default=DstFold.FIRST,
        help_text=_("Cron: the clocks fall back over it (01:30 when 02:00 goes back to 01:00)."),
    )
    calendars = models.JSONField(
        _("calendars"),
        default=list,
        blank=True,
        validators=[validate_calendar_names],
        help_text=_("Names of calendars of excluded days (holidays): no occurrence fires on them."),
    )
    calendar_rule = models.CharField(
        _("on an excluded day"),
        max_length=24,
        choices=CalendarRule.choices,
        default=CalendarRule.SKIP,
        help_text=_(
            "An occurrence on a day one of the calendars excludes is skipped, or moved to "
            "the same local time on the next business day."
        ),
    )
    # Written by the re-plans of a calendar change (services): moves of occurrences that
    # were decided under the days before it (they ran, or landed before the mark), which
    # the new days must not move again. [[first, last] epoch ms of the plain timeline].
    decided_moves = models.JSONField(_("decided moves"), default=list, blank=True, editable=False)
    anchor_at = models.DateTimeField(
        _("anchor at"),
        null=True,
        blank=True,
        help_text=_(
            "Interval: fire at this time plus whole intervals (default: the start, "
            "else when the timing was set)."
        ),
    )
    start_at = models.DateTimeField(
        _("start at"),
        null=True,
        blank=True,
        help_text=_("No occurrence before this time (cron and interval)."),
    )
    end_at = models.DateTimeField(
        _("end at"),
        null=True,
        blank=True,
        help_text=_("No occurrence after this time; the schedule then leaves the index."),
    )
    max_runs = models.PositiveIntegerField(
        _("max runs"),
        null=True,
        blank=True,
        validators=[validators.MinValueValidator(1)],
        help_text=_("Finish after this many runs."),
    )
    jitter = models.DurationField(
        _("jitter"),
        null=True,
        blank=True,
        help_text=_(
            "Delay each occurrence by up to this much (the same delay on every "
            "re-dispatch, never past the next occurrence) to spread load."
        ),
    )
    catch_up = models.CharField(
        _("catch up"),
        max_length=8,
        choices=CatchUp.choices,
        blank=True,
        help_text=_("What fires after downtime; blank: SCHEDULINATOR['CATCH_UP'] (latest)."),
    )
    catch_up_window = models.DurationField(
        _("catch up window"),
        null=True,
        blank=True,
        help_text=_(
            "Catch-up 'all': missed occurrences older than this do not fire "
            "(blank: SCHEDULINATOR['CATCH_UP_WINDOW_SECONDS'])."
        ),
    )
    overlap = models.CharField(
        _("overlap"), max_length=8, choices=Overlap.choices, default=Overlap.ALLOW
    )
    enabled = models.BooleanField(
        _("enabled"),
        default=True,
        help_text=_("Clear it to pause the schedule; its missed runs are skipped."),
    )
    pause_note = models.CharField(
        _("pause note"), max_length=500, blank=True, help_text=_("Why the schedule is paused.")
    )
    pause_after_failures = models.PositiveIntegerField(
        _("pause after failures"),
        null=True,
        blank=True,
        validators=[validators.MinValueValidator(1)],
        help_text=_("Pause the schedule after this many failed runs in a row."),
    )
    grace = models.DurationField(
        _("grace"),
        null=True,
        blank=True,
        help_text=_(
            "Raise a missed-run alert when an occurrence has no successful run this long "
            "after its nominal time (blank: no alert)."
        ),
    )
    dispatcher = models.CharField(
        _("dispatcher"),
        max_length=100,
        default=DEFAULT_DISPATCHER,
        help_text=_(
            "The alias in SCHEDULINATOR['DISPATCHERS'] that runs or hands off its occurrences."
        ),
    )
    dispatch_options = models.JSONField(
        _("dispatch options"),
        default=dict,
        blank=True,
        help_text=_('What the dispatcher supports, such as {"queue": "reports", "priority": 5}.'),
    )
    # Set by the sync of schedules declared in code (declared.py): where the declaration is.
    # Its definition is then changed in the code, not in the admin or the API.
    declared_in = models.CharField(
        _("declared in"),
        max_length=300,
        blank=True,
        editable=False,
        help_text=_("Where the code declares this schedule; empty for one made by hand."),
    )

    # Owned by the scheduler: never edited in forms, and preserved when an instance loaded
    # earlier is saved again (see save()).
    next_run_at = models.DateTimeField(
        _("next run at"),
        null=True,
        blank=True,
        editable=False,
        db_index=True,
        help_text=_("The nominal time of the next occurrence (kept while paused)."),
    )
    due_at = models.DateTimeField(
        _("due at"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("When the next occurrence fires: next_run_at plus its jitter."),
    )
    last_run_at = models.DateTimeField(_("last run at"), null=True, blank=True, editable=False)
    # How far the timeline has been decided: the guarantee that nothing fires twice, kept in
    # the row (retention deletes ledger rows, this stays). Written by the claim's conditional
    # advance and by every path that moves the next run past occurrences it does not record
    # (create, re-time, resume, run now); never moved back. No next run is ever at or before
    # it (a constraint of the table), so no plan, re-plan or bulk write can re-arm what fired.
    fired_through = models.DateTimeField(
        _("fired through"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "Every occurrence at or before this time has fired or was passed over; none of "
            "them fires again."
        ),
    )
    # Written by the missed-run check (alerts.py) only: the mark in the admin and the API,
    # and for an occurrence that never fired, what keeps it from being raised twice.
    missed_at = models.DateTimeField(
        _("missed"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The nominal time of the last occurrence that had no successful run within the grace."
        ),
    )
    run_count = models.PositiveBigIntegerField(_("run count"), default=0, editable=False)
    failure_streak = models.PositiveIntegerField(_("failure streak"), default=0, editable=False)
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True, editable=False)
    # Bumped by every write, the scheduler's advance included: guards the index.
    revision = models.PositiveBigIntegerField(_("revision"), default=1, editable=False)
    # Bumped by every change of the settings (save(), pause, resume, auto-pause), not by the
    # scheduler firing it: the precondition of an edit (the API's ETag, the admin's form), so
    # an edit loses only to another edit, never to a schedule that fired meanwhile.
    version = models.PositiveBigIntegerField(
        _("version"),
        default=1,
        editable=False,
        help_text=_(
            "Bumped by every change of the schedule's settings; send it back with an "
            "update so that a stale edit is refused instead of overwriting a newer one."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # Set on every save (not by the scheduler's advance) from the database's clock, never a
    # host's: the reconcile watermark.
    updated_at = DatabaseClockField(_("updated at"))

    # The settings as services.validate found them valid (mark_validated), until a save.
    _validated: str | None = None

    objects: ClassVar[ScheduleQuerySet[Schedule]] = ScheduleQuerySet.as_manager()  # type: ignore[assignment]

    TIMING_FIELDS = (
        "kind", "cron", "day_rule", "interval", "run_at", "solar_event", "latitude",
        "longitude", "solar_offset", "timezone", "start_at", "end_at", "anchor_at", "dst_gap",
        "dst_fold", "jitter", "calendars", "calendar_rule", "max_runs", "enabled",
    )  # fmt: skip
    MACHINE_FIELDS = (
        "next_run_at", "due_at", "last_run_at", "run_count", "failure_streak", "missed_at",
        "fired_through", "decided_moves",
    )  # fmt: skip
    # Remembered as loaded (``_loaded``): save() compares against them.
    LOADED_FIELDS = (*TIMING_FIELDS, *MACHINE_FIELDS, "task", "dispatcher")
    # What people set, in the order forms and the API show it; the change log diffs these.
    SETTINGS_FIELDS = (
        "name", "task", "args", "kwargs", "enabled", "pause_note",
        "kind", "cron", "day_rule", "interval", "run_at", "solar_event", "latitude",
        "longitude", "solar_offset", "timezone", "anchor_at", "dst_gap", "dst_fold", "start_at",
        "end_at", "max_runs", "jitter", "calendars", "calendar_rule", "catch_up",
        "catch_up_window", "overlap", "pause_after_failures", "grace", "dispatcher",
        "dispatch_options",
    )  # fmt: skip

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ("name",)
        permissions = [
            ("view_operations", _("Can view the scheduler's operations page and index health")),
            ("rebuild_index", _("Can rebuild the due index")),
        ]
        indexes = [
            # The reconcile pass pages through rows changed since its watermark.
            models.Index(fields=["updated_at", "id"], name="schedulinator_changed"),
        ]
        constraints = [
            # The exactly-once guarantee, enforced for every writer (an older release, a
            # bulk update, a bug): a next run at or before what fired would fire it again.
            models.CheckConstraint(
                condition=Q(next_run_at__isnull=True)
                | Q(fired_through__isnull=True)
                | Q(next_run_at__gt=models.F("fired_through")),
                name="schedulinator_next_after_fired",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Check the row's own rules (``full_clean``) and write the row: nothing more.

        It decides no state, and reads no clock; what needs the clock or the dispatchers
        (a new one-off whose time has passed, an alias that cannot serve the schedule) is
        ``services.validate``'s, which the services call. The services decide every
        transition at the "now" they take (a new schedule's first run, re-timing, pause,
        resume, run now), set the fields, and save them with ``update_fields``. What it does
        keep protects the data, whoever saves:

        - a save of a saved schedule moves its counters (``querysets.counters_moved``:
          revision, version, ``updated_at``), so the index and a scheduler's conditional
          advance see the write;
        - a whole-row save (no ``update_fields``) writes the scheduler's fields
          (``MACHINE_FIELDS``) only where this instance changed them: an instance loaded
          before the scheduler fired the schedule must not write back the old
          ``next_run_at``, which would re-arm an occurrence that fired;
        - a write that would leave the row inconsistent is refused with a
          ``ValidationError`` that names the service to use (``transition_errors``).

        The rules are checked once a write: here, unless ``services.validate`` found these
        very settings valid just before (``mark_validated``), as every service does.

        Why the guards stay here rather than in the services' write helper: a save of the
        model is a path of its own (user code, a shell, a data fix), and what stops an
        occurrence firing twice must hold on every path, not only the services'.
        """
        if self._validated is None or self._validated != self._settings_text():
            self.full_clean(validate_unique=False, validate_constraints=False)
        self._validated = None  # one write: the next save checks again
        update_fields = kwargs.get("update_fields")
        written: set[str] | None = None  # None: an insert writes every field
        if not self._state.adding:
            written = set(self._edited_fields() if update_fields is None else update_fields)
        errors = self.transition_errors(written)
        if errors:
            raise ValidationError(errors)
        if self.next_run_at is not None:
            self.next_run_at = timing.truncate_ms(self.next_run_at)  # the index's precision
        if written is not None:
            for name, value in counters_moved().items():
                setattr(self, name, value)
            kwargs["update_fields"] = written | set(COUNTERS)
        super().save(*args, **kwargs)
        if written is not None:  # the counters, as the statement moved them
            db = kwargs.get("using") or router.db_for_write(type(self), instance=self)
            self.refresh_from_db(using=db, fields=["revision", "version"])
        self._loaded = {f: getattr(self, f) for f in self.LOADED_FIELDS}

    def mark_validated(self) -> None:
        """Its settings as ``services.validate`` has just found them: the next ``save()``
        writes them without checking them again, unless they change before it."""
        self._validated = self._settings_text()

    def _settings_text(self) -> str | None:
        # By value (repr), so that an argument edited in place after the check shows; None
        # (unlike any text) for arguments nested too deep to write out, which full_clean names.
        try:
            return repr([getattr(self, name) for name in self.SETTINGS_FIELDS])
        except RecursionError:
            return None

    def _edited_fields(self) -> list[str]:
        """What a whole-row save writes: every field, but the scheduler's fields this
        instance did not change (see ``save``)."""
        loaded = getattr(self, "_loaded", {})
        return [
            f.name
            for f in self._meta.concrete_fields
            if not f.primary_key
            and (f.name not in self.MACHINE_FIELDS or getattr(self, f.name) != loaded.get(f.name))
        ]

    def transition_errors(self, written: Collection[str] | None) -> dict[str, StrOrPromise]:
        """What a save that writes ``written`` (None: an insert) would leave inconsistent,
        since ``save()`` decides no state: a new schedule whose first run nobody decided
        (``set_first_run``); changed timing whose next run does not move with it; a pause
        or a resume whose ``paused_at`` does not follow ``enabled``. By field."""
        errors: dict[str, StrOrPromise] = {}
        if written is None:
            if self.next_run_at is None and not getattr(self, "_first_run_set", False):
                errors["next_run_at"] = NO_FIRST_RUN
            pause_written = True
        else:
            loaded = getattr(self, "_loaded", {})
            changed = {
                f for f in self.TIMING_FIELDS if f in written and getattr(self, f) != loaded.get(f)
            }
            if changed - {"enabled"} and "next_run_at" not in written:
                errors["next_run_at"] = NOT_RETIMED % {
                    "fields": ", ".join(sorted(changed - {"enabled"}))
                }
            pause_written = "enabled" in changed
            if pause_written and "paused_at" not in written:
                errors["enabled"] = NOT_PAUSED if not self.enabled else NOT_RESUMED
                return errors
        if pause_written and self.enabled == (self.paused_at is not None):
            errors["enabled"] = NOT_PAUSED if not self.enabled else NOT_RESUMED
        return errors

    def set_first_run(self, now: datetime) -> None:
        """Decide where a new schedule starts, seen at ``now``: its next run (the
        ``next_run_at`` it was given, else its first occurrence after ``now``; None if it
        has none), its due time (before jitter, which needs the primary key:
        ``jitter_first_run`` adds it after the insert), and ``paused_at`` if it starts paused.

        ``services.create`` calls it with the schedulers' clock (Redis ``TIME``). Code that
        saves a new schedule itself calls it before ``save()``, which reads no clock and
        refuses a new schedule whose first run nobody decided. A schedule with no occurrence
        left (an end passed, its runs used up) is decided too: it is saved finished."""
        if self.next_run_at is None:
            self.next_run_at = self.first_run_at(now)
        else:
            self.next_run_at = timing.truncate_ms(self.next_run_at)
        self.due_at = self.next_run_at
        self.passed_over(now)
        if not self.enabled:
            self.paused_at = self.paused_at or now
        # Decided, whatever it was: no next run is a finished schedule, not a forgotten one.
        self._first_run_set = True

    def jitter_first_run(self, using: str) -> None:
        """Give a just-inserted schedule's first due time its jitter, which needs the primary
        key: after ``save()``, in the insert's transaction (nobody has seen the row yet, so
        no counter moves)."""
        if self.jitter and self.next_run_at is not None:
            self.due_at = self.due_at_for(self.next_run_at)
            type(self).objects.using(using).filter(pk=self.pk).update(due_at=self.due_at)
        self._first_run_set = True

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        """Delete the schedule with its runs, its row locked first (see
        ``ScheduleQuerySet.delete``): a run a scheduler is inserting meanwhile goes with it
        instead of failing the delete on its foreign key."""
        db = using or router.db_for_write(type(self), instance=self)
        with transaction.atomic(using=db):
            locked = type(self)._base_manager.using(db).filter(pk=self.pk).select_for_update()
            list(locked.values_list("pk", flat=True))
            return super().delete(using=db, keep_parents=keep_parents)

    def take_saved(self, saved: Schedule, fields: Iterable[str]) -> None:
        """Take ``fields`` from ``saved``, a copy of this row just written (a service works on
        the row locked as it is now, not on the caller's instance), as the row holds them:
        a later ``save()`` of this instance compares against them."""
        names = list(fields)
        for name in names:
            setattr(self, name, getattr(saved, name))
        self._loaded = {
            **getattr(self, "_loaded", {}),
            **{f: getattr(saved, f) for f in names if f in self.LOADED_FIELDS},
        }

    def refresh_from_db(
        self,
        using: str | None = None,
        fields: Any = None,
        from_queryset: models.QuerySet[Any] | None = None,
    ) -> None:
        # The row as it is now, this transaction's writes included: from the write database
        # (a read replica behind a router cannot see an uncommitted save, and lags).
        if using is None and from_queryset is None:
            using = router.db_for_write(type(self), instance=self)
        # What was loaded is what the row holds now: a later save() compares against it.
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)
        self._loaded = {
            **getattr(self, "_loaded", {}),
            **{f: getattr(self, f) for f in self.LOADED_FIELDS if fields is None or f in fields},
        }

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any, **kwargs: Any) -> Schedule:
        # **kwargs: Django 6.1 passes fetch_mode, 5.2 does not.
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._loaded = {
            name: value
            for name, value in zip(field_names, values, strict=True)
            if name in cls.LOADED_FIELDS
        }
        return instance

    @property
    def timing_spec(self) -> timing.Timing:
        """The fields that decide when it fires, with its calendars' excluded days."""
        return self._timing(with_days=True)

    def timing_with(self, loaded: dict[str, LoadedCalendar]) -> timing.Timing:
        """The timing with the excluded days of its calendars as ``loaded`` has them (what
        ``load_calendars`` read, or a calendar's days before a change): no query."""
        spec = self._timing(with_days=False)
        if not self.calendars or spec.calendar is None:
            return spec
        db = self._state.db or router.db_for_read(Calendar)
        days = day_calendar(self.calendars, self.calendar_rule, using=db, loaded=loaded)
        return dataclasses.replace(spec, calendar=days)

    def _timing(self, *, with_days: bool) -> timing.Timing:
        return timing.Timing.of(self, self._day_calendar(with_days))

    def _day_calendar(self, with_days: bool) -> timing.DayCalendar | None:
        """Its calendars' excluded days (read through ``day_calendar``'s cache), or without
        them only their names and the rule, which a description needs: no query."""
        try:
            validate_calendar_names(self.calendars)
        except ValidationError:
            return None  # clean_fields() says why
        if not self.calendars:
            return None
        if not with_days:
            move = self.calendar_rule == timing.CalendarRule.MOVE
            return timing.DayCalendar(move=move, names=tuple(self.calendars))
        db = self._state.db or router.db_for_read(Calendar)
        return day_calendar(self.calendars, self.calendar_rule, using=db)

    @property
    def catch_up_policy(self) -> timing.CatchUp:
        """The catch-up policy in force: this schedule's, else the settings'."""
        return catch_up_policy(self.catch_up, self.catch_up_window)

    @property
    def description(self) -> str:
        """The timing in words, e.g. "At 06:00, Monday through Friday (Europe/Berlin)"."""
        return timing.describe(self._timing(with_days=False))

    def preview(self, count: int = 10) -> list[timing.PreviewItem]:
        """The next ``count`` occurrences, in local time and UTC, DST changes flagged; for a
        paused schedule, those that would follow a resume now. For an unsaved schedule, or
        timing changed and not saved yet (a form being edited), those that saving it now
        would give."""
        loaded = getattr(self, "_loaded", {})
        edited = any(
            getattr(self, f) != loaded.get(f) for f in self.TIMING_FIELDS if f != "enabled"
        )
        start = self.next_run_at if self.enabled and not edited else None
        if start is None:
            start = self.first_run_at(clock.now())
        if start is None:
            return []
        return timing.preview(self.timing_spec, start=start, count=count, schedule_id=self.pk or 0)

    # -- validation -----------------------------------------------------------------------

    @property
    def keeps_task(self) -> bool:
        """Whether this saved schedule still names the task it was loaded with.

        A task that is no longer registered is checked only when it is being set: the
        schedule can still be paused, resumed or edited otherwise, in code, the admin and
        the API alike (its runs fail with "not registered" until the task is back)."""
        return not self._state.adding and getattr(self, "_loaded", {}).get("task") == self.task

    def clean_fields(self, exclude: Any = None) -> None:
        exclude = set(exclude or ())
        if self.keeps_task:
            exclude.add("task")
        # Django's DurationField and DateTimeField raise TypeError, not ValidationError, for
        # values of other types (interval=3600): report those as errors of their fields.
        errors: dict[str, Any] = {}
        for name, types, expected in (
            ("interval", (timedelta, str), "a duration (datetime.timedelta)"),
            ("jitter", (timedelta, str), "a duration (datetime.timedelta)"),
            ("catch_up_window", (timedelta, str), "a duration (datetime.timedelta)"),
            ("grace", (timedelta, str), "a duration (datetime.timedelta)"),
            ("solar_offset", (timedelta, str), "a duration (datetime.timedelta)"),
            ("run_at", (date, str), "a date and time (datetime.datetime)"),
            ("start_at", (date, str), "a date and time (datetime.datetime)"),
            ("end_at", (date, str), "a date and time (datetime.datetime)"),
            ("anchor_at", (date, str), "a date and time (datetime.datetime)"),
        ):
            value = getattr(self, name)
            if name not in exclude and value is not None and not isinstance(value, types):
                errors[name] = [
                    ValidationError(
                        _("Enter %(expected)s, not %(type)s."),
                        code="invalid_type",
                        params={"expected": expected, "type": type(value).__name__},
                    )
                ]
                exclude.add(name)
        # JSON nested too deep: said before the JSONField's own check recurses through it.
        for name in ("args", "kwargs"):
            if name not in exclude and json_too_deep(getattr(self, name)):
                errors[name] = [json_too_deep_error()]
                exclude.add(name)
        try:
            super().clean_fields(exclude=exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)

    def clean(self) -> None:
        super().clean()
        errors: dict[str, StrOrPromise] = {**self.timing_spec.validate()}
        errors.update(payload_errors(self.args, self.kwargs))
        if missing := self._unknown_calendars():
            errors["calendars"] = _("No calendar is named %(names)s.") % {
                "names": ", ".join(missing)
            }
        if self.task in registry and not errors.get("args") and not errors.get("kwargs"):
            # What the task itself asks of its arguments (the command task: its allowlist).
            check_args = registry.get(self.task).check_args
            if check_args is not None:
                for field, message in check_args(self.args, self.kwargs).items():
                    errors.setdefault(field, message)
        # clean_fields() skips the validators of blank values: None would break NOT NULL and
        # an empty list or string as kwargs would reach the task.
        for field, validate in (("args", validate_json_list), ("kwargs", validate_json_object)):
            value = getattr(self, field)
            if value in validators.EMPTY_VALUES:
                try:
                    validate(value)
                except ValidationError as exc:
                    errors.setdefault(field, exc.messages[0])
        window = self.catch_up_window
        if isinstance(window, timedelta) and window < timedelta(seconds=1):
            errors.setdefault(
                "catch_up_window", _("The catch-up window must be at least 1 second.")
            )
        for name, problem in grace_errors(self.grace, self.jitter).items():
            errors.setdefault(name, problem)
        if errors:
            raise ValidationError(errors)
        # What needs more than the row (the clock, the dispatchers): services.validate.

    def _unknown_calendars(self) -> list[str]:
        try:
            validate_calendar_names(self.calendars)
        except ValidationError:
            return []  # clean_fields() says why
        if not self.calendars:
            return []
        db = self._state.db or router.db_for_read(Calendar)
        known = set(
            Calendar.objects.using(db)
            .filter(name__in=self.calendars)
            .values_list("name", flat=True)
        )
        return [name for name in self.calendars if name not in known]

    # -- timing helpers -------------------------------------------------------------------

    def first_run_at(self, now: datetime) -> datetime | None:
        """The first occurrence after ``now`` (None: the schedule has finished), never at
        or before what it fired through (``fired_through``): a one-off that ran stays
        finished, whatever its ``run_at``."""
        if self.max_runs is not None and self.run_count >= self.max_runs:
            return None  # finished
        # A cron's or an interval's end bounds its occurrences (timing); a one-off's end,
        # which came before its time or has passed, leaves it none.
        run_at, end_at = self.run_at, self.end_at
        if self.kind == self.Kind.ONCE and run_at and end_at and end_at < max(run_at, now):
            return None
        spec = self.timing_spec
        first = timing.first_run_at(spec, now)
        if first is not None and self.fired_through is not None and first <= self.fired_through:
            return self.next_after(self.fired_through)
        return first

    def next_after(self, after: datetime) -> datetime | None:
        """The first moment of its timeline after ``after`` and after what it fired through
        (markers included: a skip to record is where the schedule goes next)."""
        if self.fired_through is not None:
            after = max(after, self.fired_through)
        found = timing.following(self.timing_spec, after, after, include_skipped=True)
        return found.at if found is not None else None

    def passed_over(self, now: datetime) -> None:
        """Record that the next run was just decided at ``now`` (created, re-timed, resumed),
        passing over the occurrences before it that nothing records: what it fired through
        moves up to ``now``, or to just before the next run when that is earlier (a one-off
        due a moment ago, a backlog kept by a resume with catch-up). Never back."""
        through = now if self.next_run_at is None else min(now, self.next_run_at - timing.ONE_MS)
        self.advance_mark(timing.truncate_ms(through))

    def advance_mark(self, through: datetime) -> None:
        """Move ``fired_through`` up to ``through`` (never back)."""
        if self.fired_through is None or through > self.fired_through:
            self.fired_through = through

    def due_at_for(self, nominal: datetime | None) -> datetime | None:
        """When the occurrence at ``nominal`` fires: plus this schedule's jitter."""
        if nominal is None or not self.jitter or self.pk is None:
            return nominal
        return timing.due_time(self.timing_spec, self.pk, nominal)

    def resume_plan(self, now: datetime) -> tuple[list[timing.Moment], datetime | None]:
        """What resuming at ``now`` implies: the occurrences passed over while paused (the
        most recent, capped) and the next run after ``now``, on the grid the schedule had
        (intervals keep their anchor)."""
        stopped_at = self.next_run_at
        if stopped_at is None or stopped_at > now:
            return [], stopped_at if stopped_at is not None else self.first_run_at(now)
        if self.max_runs is not None and self.run_count >= self.max_runs:
            return [], None
        spec = self.timing_spec
        limit = app_settings.MAX_SKIPS_RECORDED
        passed: list[timing.Moment] = []
        for moment in timing.occurrences_before(
            spec, now + timing.ONE_MS, anchor=stopped_at, include_skipped=True
        ):
            if moment.at < stopped_at or len(passed) >= limit:
                break
            passed.append(moment)
        following = timing.following(
            spec, max(now, self.fired_through or now), stopped_at, include_skipped=True
        )
        return passed[::-1], following.at if following else None


def alert_time(grace: timedelta | None, counted_from: datetime) -> datetime | None:
    """When a run counted from ``counted_from`` (its nominal time, or when it was queued)
    is missed if it has not succeeded: None without a grace."""
    return None if grace is None else counted_from + grace


def catch_up_policy(mode: str, window: timedelta | None) -> timing.CatchUp:
    """A schedule's catch-up policy: its own fields, the settings where they are blank."""
    return timing.CatchUp(
        mode=mode or app_settings.CATCH_UP,
        window=window or timedelta(seconds=app_settings.CATCH_UP_WINDOW_SECONDS),
        max_runs=app_settings.CATCH_UP_MAX_RUNS,
        grace=timedelta(seconds=app_settings.MISFIRE_GRACE_SECONDS),
    )


class SchedulerOperations(Schedule):
    """No rows of its own: the admin's entry for the operations page, so that the admin
    index and its sidebar link to it (``admin.operations.OperationsEntryAdmin``). It adds no
    permission: the page needs the schedule's ``view_operations``."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("scheduler operations")
        verbose_name_plural = _("scheduler operations")
