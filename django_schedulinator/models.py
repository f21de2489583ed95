"""Schedules (the canonical rows) and Runs (the ledger of occurrences)."""

from __future__ import annotations

import json
import unicodedata
from datetime import date, datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.core import validators
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from . import timing
from .conf import app_settings
from .querysets import RunQuerySet, ScheduleQuerySet
from .registry import OCCURRENCE_PARAMETER, registry


def default_timezone() -> str:
    return settings.TIME_ZONE or "UTC"


def occurrence_key(schedule_id: int, scheduled_for: datetime) -> str:
    """The idempotency key of one occurrence: ``"<schedule id>:<epoch ms of nominal time>"``.

    Deterministic, so every (re-)dispatch of the same occurrence carries the same key and a
    receiver can dedupe on it.
    """
    return f"{schedule_id}:{timing.to_ms(scheduled_for)}"


def validate_registered_task(value: str) -> None:
    if value not in registry:
        known = ", ".join(registry.names()[:10]) or "none registered yet"
        raise ValidationError(
            "%(value)r is not a registered task (registered: %(known)s). Register it with "
            "@django_schedulinator.task.",
            code="unregistered_task",
            params={"value": value, "known": known},
        )


def validate_json_list(value: Any) -> None:
    if not isinstance(value, list):
        raise ValidationError(
            'Enter a JSON list of positional arguments, for example [1, "a"]; got %(type)s.',
            code="not_a_list",
            params={"type": type(value).__name__},
        )
    _validate_strict_json(value)


def _validate_strict_json(value: Any) -> None:
    # json.dumps writes NaN and Infinity by default; they are not JSON (PostgreSQL refuses them).
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValidationError(
            "NaN and Infinity are not valid JSON numbers.", code="not_json"
        ) from None
    except TypeError:
        pass  # not JSON at all: the field's own validation says so


def validate_json_object(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError(
            'Enter a JSON object of keyword arguments, for example {"a": 1}; got %(type)s.',
            code="not_an_object",
            params={"type": type(value).__name__},
        )
    if OCCURRENCE_PARAMETER in value:
        raise ValidationError(
            "%(name)r is reserved: the scheduler passes the occurrence itself.",
            code="reserved_kwarg",
            params={"name": OCCURRENCE_PARAMETER},
        )
    _validate_strict_json(value)


def validate_name(value: str) -> None:
    # Spaces and invisible format characters (zero-width space, ...) alone make no name.
    if not any(c.isprintable() and not c.isspace() for c in value):
        raise ValidationError(
            "Enter a name that is not only spaces or invisible characters.", code="blank_name"
        )
    bad = sorted({c for c in value if unicodedata.category(c) in ("Cc", "Zl", "Zp")})
    if bad:
        raise ValidationError(
            "A name cannot hold control characters or line breaks (found %(chars)s).",
            code="control_characters",
            params={"chars": ", ".join(f"U+{ord(c):04X}" for c in bad)},
        )


def payload_errors(args: Any, kwargs: Any) -> dict[str, str]:
    """A size error for the larger of args and kwargs when together they exceed the limit.

    Every occurrence copies both into the ledger, so the limit bounds what each run costs.
    """
    try:
        sizes = {
            "args": len(json.dumps(args).encode()),
            "kwargs": len(json.dumps(kwargs).encode()),
        }
    except (TypeError, ValueError):
        return {}  # not JSON: the field's own validation says so
    limit = app_settings.MAX_PAYLOAD_BYTES
    total = sum(sizes.values())
    if total <= limit:
        return {}
    field = max(sizes, key=lambda name: sizes[name])
    return {
        field: f"args and kwargs take {total:,} bytes of JSON together; the limit is "
        f"{limit:,} (SCHEDULINATOR['MAX_PAYLOAD_BYTES'])."
    }


def validate_timezone(value: str) -> None:
    # Kept for migration 0001; clean() reports zone errors (once) through Timing.validate().
    try:
        timing.get_zone(value)
    except timing.TimingError as exc:
        raise ValidationError(str(exc), code="unknown_timezone") from None


class Schedule(models.Model):
    class Kind(models.TextChoices):
        CRON = timing.CRON, "Cron"
        INTERVAL = timing.INTERVAL, "Interval"
        ONCE = timing.ONCE, "One-off"

    name = models.CharField(max_length=200, unique=True, validators=[validate_name])
    task = models.CharField(
        max_length=200,
        validators=[validate_registered_task],
        help_text="A task registered with @django_schedulinator.task.",
    )
    args = models.JSONField(default=list, blank=True, validators=[validate_json_list])
    kwargs = models.JSONField(default=dict, blank=True, validators=[validate_json_object])
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(
        max_length=timing.MAX_CRON_LENGTH,
        blank=True,
        help_text="5 fields (minute hour day month weekday), an optional leading seconds "
        "field, or @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually.",
    )
    interval = models.DurationField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True, help_text="When a one-off runs.")
    timezone = models.CharField(
        max_length=64,
        default=default_timezone,
        help_text="IANA zone in which the cron expression is evaluated.",
    )
    start_at = models.DateTimeField(
        null=True, blank=True, help_text="No occurrence before this time (cron and interval)."
    )
    end_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="No occurrence after this time; the schedule then leaves the index.",
    )
    enabled = models.BooleanField(default=True)

    # Owned by the scheduler: never edited in forms, and preserved when an instance loaded
    # earlier is saved again (see save()).
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False, db_index=True)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    run_count = models.PositiveBigIntegerField(default=0, editable=False)
    revision = models.PositiveBigIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set on every save (not by the scheduler's advance): the reconcile watermark.
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[ScheduleQuerySet] = ScheduleQuerySet.as_manager()  # type: ignore[assignment]

    TIMING_FIELDS = (
        "kind", "cron", "interval", "run_at", "timezone", "start_at", "end_at", "enabled",
    )  # fmt: skip
    MACHINE_FIELDS = ("next_run_at", "last_run_at", "run_count")

    class Meta:
        ordering = ("name",)
        indexes = [
            # The reconcile pass pages through rows changed since its watermark.
            models.Index(fields=["updated_at", "id"], name="schedulinator_changed"),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Validate, keep ``next_run_at`` right and bump the revision in SQL.

        An instance loaded before the scheduler fired it must not write back the old
        ``next_run_at`` (that would re-arm a fired occurrence), so scheduler-owned fields are
        only written when this instance changed them or the timing changed.
        """
        self.full_clean(validate_unique=False, validate_constraints=False)
        update_fields = kwargs.get("update_fields")
        if self._state.adding:
            if self.next_run_at is None:
                self.next_run_at = self._first_run_at()
            else:
                self.next_run_at = timing.truncate_ms(self.next_run_at)
        else:
            loaded = getattr(self, "_loaded", {})
            checked = self.TIMING_FIELDS if update_fields is None else set(update_fields)
            timing_changed = any(
                getattr(self, f) != loaded.get(f) for f in self.TIMING_FIELDS if f in checked
            )
            recompute = timing_changed and self.next_run_at == loaded.get("next_run_at")
            if recompute:
                self.next_run_at = self._first_run_at()
            if update_fields is None:
                update_fields = [
                    f.name
                    for f in self._meta.concrete_fields
                    if not f.primary_key
                    and (
                        f.name not in self.MACHINE_FIELDS
                        or getattr(self, f.name) != loaded.get(f.name)
                    )
                ]
            extra = {"revision", "updated_at"} | ({"next_run_at"} if recompute else set())
            kwargs["update_fields"] = {*update_fields, *extra}
            self.revision = F("revision") + 1
        super().save(*args, **kwargs)
        if not isinstance(self.revision, int):
            self.refresh_from_db(fields=["revision"])
        self._loaded = {f: getattr(self, f) for f in (*self.TIMING_FIELDS, *self.MACHINE_FIELDS)}

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any, **kwargs: Any) -> Schedule:
        # **kwargs: Django 6.1 passes fetch_mode, 5.2 does not.
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._loaded = {
            name: value
            for name, value in zip(field_names, values, strict=True)
            if name in cls.TIMING_FIELDS or name in cls.MACHINE_FIELDS
        }
        return instance

    @property
    def timing_spec(self) -> timing.Timing:
        return timing.Timing(
            kind=self.kind,
            cron=self.cron,
            interval=self.interval,
            run_at=self.run_at,
            timezone=self.timezone,
            start_at=self.start_at,
            end_at=self.end_at,
        )

    def clean_fields(self, exclude: Any = None) -> None:
        # Django's DurationField and DateTimeField raise TypeError, not ValidationError, for
        # values of other types (interval=3600): report those as errors of their fields.
        exclude = set(exclude or ())
        errors: dict[str, Any] = {}
        for name, types, expected in (
            ("interval", (timedelta, str), "a duration (datetime.timedelta)"),
            ("run_at", (date, str), "a date and time (datetime.datetime)"),
            ("start_at", (date, str), "a date and time (datetime.datetime)"),
            ("end_at", (date, str), "a date and time (datetime.datetime)"),
        ):
            value = getattr(self, name)
            if name not in exclude and value is not None and not isinstance(value, types):
                errors[name] = [
                    ValidationError(
                        "Enter %(expected)s, not %(type)s.",
                        code="invalid_type",
                        params={"expected": expected, "type": type(value).__name__},
                    )
                ]
                exclude.add(name)
        try:
            super().clean_fields(exclude=exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)

    def clean(self) -> None:
        super().clean()
        errors = self.timing_spec.validate()
        errors.update(payload_errors(self.args, self.kwargs))
        # clean_fields() skips the validators of blank values: None would break NOT NULL and
        # an empty list or string as kwargs would reach the task.
        for field, validate in (("args", validate_json_list), ("kwargs", validate_json_object)):
            value = getattr(self, field)
            if value in validators.EMPTY_VALUES:
                try:
                    validate(value)
                except ValidationError as exc:
                    errors.setdefault(field, exc.messages[0])
        new_one_off = self.kind == self.Kind.ONCE and self._state.adding
        if (
            new_one_off
            and "run_at" not in errors
            and self.run_at
            and self.run_at < timezone.now() - timedelta(minutes=1)
        ):
            errors.setdefault("run_at", "A new one-off must run in the future.")
        if errors:
            raise ValidationError(errors)

    def _first_run_at(self) -> datetime | None:
        if not self.enabled:
            return None
        return timing.first_run_at(self.timing_spec, timezone.now())


class Run(models.Model):
    """One occurrence of a schedule: the ledger that makes firing exactly-once decidable."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DISPATCHED = "dispatched", "Dispatched"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped"

    # No index of its own: the unique (schedule, scheduled_for) constraint serves lookups.
    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    scheduled_for = models.DateTimeField(help_text="The nominal time of the occurrence.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # What was dispatched, as it was at claim time: a re-dispatch sends exactly the same.
    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    claimed_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker_id = models.CharField(max_length=200)
    # The claim batch that owns a pending run; a takeover writes a new one.
    claim_token = models.CharField(max_length=40)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    error = models.TextField(blank=True)

    objects: ClassVar[RunQuerySet] = RunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ("-scheduled_for",)
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "scheduled_for"], name="schedulinator_run_once"
            )
        ]
        indexes = [
            # Only pending runs: it stays as small as the work in flight.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="pending"),
                name="schedulinator_run_lease",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.scheduled_for.isoformat()} ({self.status})"

    @property
    def idempotency_key(self) -> str:
        return occurrence_key(self.schedule_id, self.scheduled_for)
