"""Serializers of the API. Validation is ``services.validate``'s (the model's own rules and
what the dispatcher and the clock decide): one set of rules for the admin, the API and
code, and each error names its field."""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterator
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.urls import reverse
from django.utils.functional import cached_property
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import build_array_type, build_object_type
from drf_spectacular.utils import Direction, extend_schema_field
from rest_framework import serializers

from django_schedulinator import outcomes
from django_schedulinator.api.negotiation import too_deep_message
from django_schedulinator.conf import MAX_PREVIEW_COUNT, app_settings
from django_schedulinator.models import Calendar, Run, Schedule, ScheduleChange
from django_schedulinator.models.validators import MAX_DAYS, json_text_too_deep, json_too_deep
from django_schedulinator.registry import registry
from django_schedulinator.services import validate
from django_schedulinator.statuses import ReportedStatus

# Python's datetime and timedelta overflow past these: a clear error instead of a crash.
DURATION_LIMIT = timedelta(days=999_999)


class DurationField(serializers.DurationField):
    """Answered as a number of seconds (an integer when whole; exact to the microsecond).
    Taken as seconds (a number, or a string of one), "HH:MM:SS", "D HH:MM:SS" or ISO 8601
    ("PT1H30M", "P1DT2H")."""

    def to_representation(self, value: timedelta) -> int | float:  # type: ignore[override]
        if value.microseconds:
            return value.total_seconds()
        return value.days * 86_400 + value.seconds

    def to_internal_value(self, value: Any) -> timedelta:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                parsed = timedelta(seconds=value)
            except (OverflowError, ValueError):
                self.fail("invalid", format="a number of seconds or [DD] [HH:[MM:]]ss[.uuuuuu]")
        else:
            try:
                parsed = super().to_internal_value(value)
            except OverflowError:
                self.fail("invalid", format="[DD] [HH:[MM:]]ss[.uuuuuu]")
        if abs(parsed) > DURATION_LIMIT:
            raise serializers.ValidationError(f"Enter a duration of at most {DURATION_LIMIT}.")
        return parsed


class JSONField(serializers.JSONField):
    """args and kwargs: nested at most MAX_JSON_DEPTH deep, measured before anything
    recurses through them (a form post's text is parsed here, by Python's json)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bytes | str) and (
            self.binary or getattr(data, "is_json_string", False)
        ):
            text = data.decode(errors="replace") if isinstance(data, bytes) else data
            too_deep = bool(json_text_too_deep(text))
        else:
            too_deep = json_too_deep(data)
        if too_deep:
            raise serializers.ValidationError(too_deep_message())
        return super().to_internal_value(data)


class DurationFieldSchema(OpenApiSerializerFieldExtension):
    """Answers: a number of seconds. Requests: that, or a string in one of the formats that
    DurationField takes."""

    target_class = DurationField

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        seconds = {"type": "number", "description": "Seconds."}
        if direction == "response":
            return seconds
        text = {
            "type": "string",
            "description": 'Seconds ("90"), "HH:MM:SS", "D HH:MM:SS" or ISO 8601 ("PT1H30M").',
        }
        return {"oneOf": [seconds, text]}


class DateTimeField(serializers.DateTimeField):
    """ISO 8601; a time without an offset is read in the project's TIME_ZONE."""

    def to_internal_value(self, value: Any) -> Any:
        try:  # parses, then converts to the project's zone (which may overflow)
            return super().to_internal_value(value)
        except (OverflowError, ValueError):
            raise serializers.ValidationError(
                "Enter a date and time that can be converted to UTC."
            ) from None


def apply_model_validation(
    instance: Schedule, *, exclude_unique: bool = False, only: Collection[str] | None = None
) -> None:
    """Run ``services.validate``; its errors become the API's, field by field. ``only``:
    check and report just these fields (a timing preview has no name or task)."""
    exclude = None
    if only is not None:
        exclude = [f.name for f in Schedule._meta.fields if f.name not in only]
    try:
        validate(instance, exclude=exclude, validate_unique=not exclude_unique)
    except DjangoValidationError as exc:
        errors = _as_drf_errors(exc)
        if only is not None:
            errors = {name: messages for name, messages in errors.items() if name in only}
        if errors:
            raise serializers.ValidationError(errors) from None


def _as_drf_errors(exc: DjangoValidationError) -> dict[str, list[str]]:
    if not hasattr(exc, "error_dict"):
        return {"non_field_errors": exc.messages}
    return {
        ("non_field_errors" if field == "__all__" else field): messages
        for field, messages in exc.message_dict.items()
    }


class FieldsBuiltOnce:
    """A model serializer whose fields are built from the model once per class, not per
    instance: DRF's ``ModelSerializer.get_fields`` maps every model field again for each
    serializer (its labels, help texts, validators and lengths), which for a schedule's 30-odd
    fields was about 3 ms of CPU in every request that shows one (issue 23).

    What it builds depends on the class alone (Meta and the declared fields, never the
    instance, the data or the context), so each instance binds copies of the fields built
    first. A plain field is copied shallowly (binding sets the copy's own name and parent;
    its validators and messages are shared, as nothing changes them); a field with a child
    field or serializer is deep-copied, as DRF copies declared fields, so the child's
    parent is the copy."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        owner = type(self)
        built = owner.__dict__.get("_fields_built")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            owner._fields_built = built  # type: ignore[attr-defined]
        return {name: _copy_of(field) for name, field in built.items()}


def _copy_of(field: serializers.Field[Any, Any, Any, Any]) -> Any:
    if isinstance(field, serializers.BaseSerializer) or any(
        hasattr(field, child) for child in ("child", "child_relation")
    ):
        return copy.deepcopy(field)
    # copy.copy, without its generic protocol (a third of this serializer's setup).
    clone = object.__new__(type(field))
    clone.__dict__ = field.__dict__.copy()
    return clone


class TaskField(serializers.ChoiceField):
    """A registered task's name; a schedule keeps one that is no longer registered."""


class TaskFieldSchema(OpenApiSerializerFieldExtension):
    """Requests choose from the registered tasks; responses may name a task that is no
    longer registered (a schedule keeps it), so there the task is any string."""

    target_class = TaskField

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        if direction == "request":
            schema: dict[str, Any] = auto_schema._map_serializer_field(
                self.target, direction, bypass_extensions=True
            )
            return schema
        return {"type": "string", "description": self.target.help_text}


class FlatListField(serializers.ListField):
    """A list whose items' errors are one list of messages, each naming its item ("Item
    2: ..."): the documented error shape, where a field's errors are strings."""

    def to_representation(self, data: Any) -> list[Any]:
        return super().to_representation(data.all() if hasattr(data, "all") else data)

    def run_child_validation(self, data: list[Any]) -> list[Any]:
        try:
            return super().run_child_validation(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(list(_flat(exc.detail))) from None


def _flat(detail: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            label = f"Item {int(key) + 1}" if isinstance(key, int) or str(key).isdigit() else key
            yield from _flat(value, f"{prefix}{label}: ")
    elif isinstance(detail, list):
        for value in detail:
            yield from _flat(value, prefix)
    else:
        yield f"{prefix}{detail}"


# The scheduler's own fields an answer shows: not the moves a calendar change decided (the
# re-plans' bookkeeping, in the walk's terms).
SHOWN_MACHINE_FIELDS = tuple(f for f in Schedule.MACHINE_FIELDS if f != "decided_moves")


class ScheduleSerializer(FieldsBuiltOnce, serializers.ModelSerializer[Schedule]):
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DurationField: DurationField,
        models.DateTimeField: DateTimeField,
        models.JSONField: JSONField,
    }

    task = TaskField(
        choices=[],
        help_text="The name of a task registered with @django_schedulinator.task.",
        error_messages={
            "invalid_choice": "'{input}' is not a registered task. Register it with "
            "@django_schedulinator.task."
        },
    )
    version = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="Read: the version of the schedule's settings, bumped by every change. "
        "Write (PUT, PATCH): the version you started from; a stale one is refused with 409 "
        "(or send it as If-Match, which is refused with 412).",
    )
    description = serializers.CharField(read_only=True, help_text="The timing in words.")
    calendars = FlatListField(
        child=serializers.CharField(max_length=100),
        required=False,
        help_text="Names of calendars of excluded days (see /calendars/): no occurrence fires "
        "on their days (calendar_rule: skip), or it moves to the next business day.",
    )
    runs_url = serializers.SerializerMethodField(help_text="This schedule's runs.")

    class Meta:
        model = Schedule
        fields = (
            "id",
            *Schedule.SETTINGS_FIELDS,
            "description",
            *SHOWN_MACHINE_FIELDS,
            "paused_at",
            "declared_in",
            "version",
            "created_at",
            "updated_at",
            "runs_url",
        )
        read_only_fields = (
            *SHOWN_MACHINE_FIELDS, "paused_at", "declared_in", "created_at", "updated_at"
        )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at request time: the registry is filled when the apps are ready. A schedule
        # keeps the task it has even when that is no longer registered (as in the model).
        current = self.instance.task if isinstance(self.instance, Schedule) else None
        task = self.fields["task"]
        assert isinstance(task, serializers.ChoiceField)
        task.choices = registry.choices(current)

    @extend_schema_field(serializers.URLField())
    def get_runs_url(self, schedule: Schedule) -> str:
        return f"{self._runs_list_url}?schedule={schedule.pk}"

    @cached_property
    def _runs_list_url(self) -> str:
        # Once per serializer, not per schedule: a page of 50 reversed and built the URL 50
        # times. The query string is ASCII, so appending it changes nothing build_absolute_uri
        # would have done.
        url = reverse("schedulinator-api:run-list")
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request is not None else url

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.pop("version", None)  # a precondition, checked by the view
        candidate = copy.copy(self.instance) if self.instance is not None else Schedule()
        for name, value in attrs.items():
            setattr(candidate, name, value)
        # The name's uniqueness is checked by the serializer's own validator already.
        apply_model_validation(candidate, exclude_unique=True)
        return attrs


class ScheduleSchema(OpenApiSerializerExtension):
    """args and kwargs typed as what the model takes (a list, an object); every field of
    a response required, since a response always has them all (generated clients then
    need no checks for absent fields)."""

    target_class = ScheduleSerializer

    def map_serializer(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(
            self.target, direction, bypass_extensions=True
        )
        properties = schema["properties"]
        properties["args"] = {**properties["args"], **build_array_type({})}
        properties["kwargs"] = {
            **properties["kwargs"],
            **build_object_type(additionalProperties={}),
        }
        if direction == "response":
            schema["required"] = sorted(properties)
        return schema


class PauseSerializer(serializers.Serializer[Any]):
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=Schedule._meta.get_field("pause_note").max_length,
        help_text="Why the schedule is paused.",
    )


class ResumeSerializer(serializers.Serializer[Any]):
    catch_up = serializers.BooleanField(
        default=False,
        help_text="Fire the paused period's occurrences under the catch-up policy instead of "
        "recording them as skipped.",
    )


class RunNowSerializer(serializers.Serializer[Any]):
    advance = serializers.BooleanField(
        default=False, help_text="Let the run take the place of the next regular run."
    )


class BackfillSerializer(serializers.Serializer[Any]):
    start = DateTimeField(help_text="The first time of the range (ISO 8601).")
    end = DateTimeField(help_text="The last time of the range, not after now.")
    dry_run = serializers.BooleanField(default=False, help_text="Count, queue nothing.")
    rerun_pruned = serializers.BooleanField(
        default=False,
        help_text="Run again the occurrences whose runs retention deleted, although some may "
        "have run (without it, such a range is refused with 409).",
    )


class BackfillReportSerializer(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField()
    occurrences = serializers.IntegerField(help_text="Occurrences in the range.")
    queued = serializers.IntegerField(help_text="New runs queued.")
    requeued = serializers.IntegerField(help_text="Skipped runs turned into runs.")
    already = serializers.IntegerField(help_text="Occurrences that fired or are queued.")
    rerun_pruned = serializers.IntegerField(
        help_text="Of those queued: occurrences whose runs retention deleted (rerun_pruned)."
    )


class PreviewQuerySerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_PREVIEW_COUNT, help_text="How many."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("count", app_settings.PREVIEW_COUNT)
        return attrs


class PreviewItemSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField(help_text="The nominal time, UTC.")
    local = serializers.DateTimeField(help_text="The same instant in the schedule's zone.")
    due_at = serializers.DateTimeField(help_text="When it fires: the nominal time plus jitter.")
    dst = serializers.CharField(help_text="How a DST change touched it, or empty.")
    skipped = serializers.BooleanField(
        help_text="Nothing fires: a local time the DST policy skips, or an excluded day."
    )
    calendar = serializers.CharField(
        help_text="How an excluded day touched it: skipped, moved (to the next business "
        "day), or empty."
    )
    note = serializers.CharField(
        help_text="A sentence about the DST change or the excluded day, or empty."
    )

    def to_representation(self, item: Any) -> dict[str, Any]:
        data = super().to_representation(item)
        data["local"] = item.local.isoformat()  # keep the schedule's offset, not UTC
        return data


class TimingPreviewSerializer(serializers.ModelSerializer[Schedule]):
    """A timing to preview before a schedule is created or changed: the timing fields of a
    schedule, validated by the same rules as a write. Nothing is saved."""

    serializer_field_mapping = ScheduleSerializer.serializer_field_mapping
    count = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_PREVIEW_COUNT,
        write_only=True,
        help_text="How many occurrences (default: SCHEDULINATOR['PREVIEW_COUNT']).",
    )

    class Meta:
        model = Schedule
        fields = (*Schedule.TIMING_FIELDS, "count")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        count = attrs.pop("count", app_settings.PREVIEW_COUNT)
        candidate = Schedule(**attrs)
        apply_model_validation(candidate, exclude_unique=True, only=Schedule.TIMING_FIELDS)
        return {"schedule": candidate, "count": count}


class TimingPreviewResultSerializer(serializers.Serializer[Any]):
    description = serializers.CharField(help_text="The timing in words.")
    occurrences = PreviewItemSerializer(many=True, help_text="The next occurrences.")


class RunSerializer(FieldsBuiltOnce, serializers.ModelSerializer[Run]):
    idempotency_key = serializers.CharField(read_only=True)
    skip_reason = serializers.ChoiceField(
        choices=Run.SkipReason.choices,
        allow_blank=True,
        read_only=True,
        help_text="Why the occurrence did not fire; empty when it did.",
    )

    class Meta:
        model = Run
        fields = (
            "id",
            "schedule",
            "scheduled_for",
            "idempotency_key",
            "status",
            "trigger",
            "skip_reason",
            "note",
            "task",
            "args",
            "kwargs",
            "dispatcher",
            "dispatch_options",
            "claimed_at",
            "dispatched_at",
            "finished_at",
            "worker_id",
            "attempts",
            "lease_expires_at",
            "external_id",
            "response_status",
            "output",
            "outcome_due_by",
            "error",
            "missed_at",
        )
        read_only_fields = fields


class ScheduleChangeSerializer(FieldsBuiltOnce, serializers.ModelSerializer[ScheduleChange]):
    class Meta:
        model = ScheduleChange
        fields = (
            "id",
            "schedule",
            "schedule_name",
            "actor",
            "actor_name",
            "source",
            "action",
            "changes",
            "version",
            "at",
        )
        read_only_fields = fields


class DriftSerializer(serializers.Serializer[Any]):
    ok = serializers.BooleanField(help_text="No entry late or missing in the sample.")
    summary = serializers.CharField()
    rows_indexable = serializers.IntegerField()
    sampled = serializers.IntegerField()
    late_or_missing = serializers.ListField(child=serializers.IntegerField())
    early_or_orphaned = serializers.ListField(child=serializers.IntegerField())


class ShardStatusSerializer(serializers.Serializer[Any]):
    shard = serializers.IntegerField(help_text="Schedules with id % shard_count == shard.")
    built = serializers.BooleanField(help_text="Its build marker is there.")
    entries_due = serializers.IntegerField(allow_null=True, help_text="Entries in the shard.")
    due_now = serializers.IntegerField(
        allow_null=True, help_text="Entries whose time has come, not claimed."
    )
    in_flight = serializers.IntegerField(
        allow_null=True, help_text="Entries claimed by a scheduler."
    )
    oldest_due_lag_seconds = serializers.FloatField(
        allow_null=True, help_text="How late its earliest unclaimed due entry is."
    )


class IndexStatusSerializer(serializers.Serializer[Any]):
    schedules = serializers.IntegerField()
    enabled = serializers.IntegerField()
    indexable = serializers.IntegerField(help_text="Enabled schedules with a next run.")
    entries_due = serializers.IntegerField(
        allow_null=True, help_text="Entries in the due index (null when scoped)."
    )
    due_now = serializers.IntegerField(
        allow_null=True, help_text="Entries whose time has come, not claimed (null when scoped)."
    )
    in_flight = serializers.IntegerField(
        allow_null=True, help_text="Entries claimed by a scheduler (null when scoped)."
    )
    oldest_due_lag_seconds = serializers.FloatField(
        allow_null=True, help_text="How late the earliest unclaimed due entry is."
    )
    oldest_due_schedule = serializers.IntegerField(
        allow_null=True,
        help_text="The schedule of that entry (null when none is due, or it is one the "
        "permission classes hide).",
    )
    runs_in_flight = serializers.IntegerField(help_text="Runs pending or running.")
    last_rebuild = serializers.DictField(allow_null=True)
    rebuild_running = serializers.BooleanField()
    drift = DriftSerializer(allow_null=True)
    eviction_warning = serializers.CharField(allow_null=True)
    checked_at = serializers.DateTimeField()
    shard_count = serializers.IntegerField(help_text="INDEX_SHARDS: the shards of the index.")
    shards = ShardStatusSerializer(many=True, help_text="Each shard's figures.")
    other_layout = serializers.IntegerField(
        allow_null=True,
        help_text="The shard count the index was built for, when it is not INDEX_SHARDS "
        "(nothing fires until it is rebuilt).",
    )
    scoped = serializers.BooleanField(
        help_text="Counted for the schedules the permission classes' filter_schedules lets "
        "the user see; the index's own counts (of every schedule) are then null."
    )


class LaneDepthSerializer(serializers.Serializer[Any]):
    waiting = serializers.IntegerField(help_text="Batches waiting for the dispatcher.")
    oldest_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the oldest has waited (null when none waits)."
    )


class RecorderBacklogSerializer(serializers.Serializer[Any]):
    batches = serializers.IntegerField(
        help_text="Batches handed to the recorder whose outcomes are not written yet."
    )
    outcomes = serializers.IntegerField(help_text="Their outcomes: runs whose end is not written.")
    oldest_seconds = serializers.FloatField(
        allow_null=True,
        help_text="How long ago the oldest was handed over (null when nothing waits).",
    )


class SchedulerSerializer(serializers.Serializer[Any]):
    """A scheduler as its last heartbeat recorded it (docs/operations.md#heartbeats)."""

    id = serializers.CharField(help_text="The worker id (--worker-id, by default host:pid).")
    host = serializers.CharField()
    pid = serializers.IntegerField()
    version = serializers.CharField(help_text="The django-schedulinator version it runs.")
    started_at = serializers.DateTimeField()
    beat_at = serializers.DateTimeField(help_text="When it wrote this heartbeat.")
    last_pass_at = serializers.DateTimeField(
        allow_null=True, help_text="When its loop last completed a pass."
    )
    last_error = serializers.CharField(
        allow_blank=True, help_text="Why its passes fail now; empty while they work."
    )
    counters = serializers.DictField(child=serializers.IntegerField())
    lanes = serializers.DictField(child=LaneDepthSerializer(), help_text="By dispatcher alias.")
    recorder = RecorderBacklogSerializer(help_text="The outcomes waiting to be written.")
    metrics_port = serializers.IntegerField(allow_null=True)
    stopping = serializers.BooleanField()
    pass_age_seconds = serializers.FloatField(
        allow_null=True, help_text="Seconds since its last pass (null before the first)."
    )
    state = serializers.ChoiceField(choices=["healthy", "stale", "stopping"])


class SchedulersSerializer(serializers.Serializer[Any]):
    checked_at = serializers.DateTimeField(help_text="Redis time of the read.")
    pass_stale_seconds = serializers.FloatField()
    schedulers = SchedulerSerializer(many=True, help_text="Newest heartbeat first.")


class FindingSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Stable: see docs/operations.md.")
    message = serializers.CharField()


class DispatcherStatusSerializer(serializers.Serializer[Any]):
    alias = serializers.CharField()
    backend = serializers.CharField(help_text="Its class name, or why it cannot be built.")
    reports_outcomes = serializers.BooleanField(allow_null=True)
    awaiting = serializers.IntegerField(help_text="Handed off, their outcome awaited.")
    past_deadline = serializers.IntegerField(
        help_text="Handed off, never reported within OUTCOME_TIMEOUT_SECONDS."
    )
    retrying = serializers.IntegerField(help_text="Failed hand-offs waiting for their retry.")


class AutoPausedScheduleSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    paused_at = serializers.DateTimeField(allow_null=True)
    failure_streak = serializers.IntegerField()


class AutoPausedSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    schedules = AutoPausedScheduleSerializer(many=True, help_text="The 20 paused last.")


class ClusterStatusSerializer(serializers.Serializer[Any]):
    """What ``manage.py scheduler_status --json`` prints (docs/operations.md)."""

    healthy = serializers.BooleanField()
    checked_at = serializers.DateTimeField(help_text="Redis time of the read.")
    problems = FindingSerializer(many=True)
    warnings = FindingSerializer(many=True)
    max_lag_seconds = serializers.FloatField()
    pass_stale_seconds = serializers.FloatField()
    schedulers = SchedulerSerializer(many=True)
    index = IndexStatusSerializer()
    dispatchers = DispatcherStatusSerializer(many=True)
    auto_paused = AutoPausedSerializer()


class OutcomeReportSerializer(serializers.Serializer[Any]):
    """What a worker that ran a handed-off occurrence says of it, by the occurrence key."""

    key = serializers.CharField(
        max_length=64, help_text="The occurrence key the run was handed off with."
    )
    status = serializers.ChoiceField(
        choices=[s.value for s in ReportedStatus], help_text="What happened to the run."
    )
    error = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="What went wrong (failed); its last 4,000 characters are kept.",
    )

    def validate_error(self, value: str) -> str:
        # Any length is taken (a long traceback must not lose the report): its end is kept.
        return value[-outcomes.MAX_ERROR_CHARS :]


class OutcomeReceiptSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    changed = serializers.BooleanField(
        help_text="Whether the report changed the run: false for a repeated report, a run "
        "that already ended, or a key not in the ledger."
    )
    run_status = serializers.CharField(
        allow_null=True, help_text="The run's status now; null when the key is not in the ledger."
    )


class ExcludedDaySerializer(serializers.Serializer[Any]):
    day = serializers.DateField()
    name = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")


class CalendarSerializer(serializers.ModelSerializer[Calendar]):
    """A calendar of excluded days. Its days are written with it when it is kept by hand
    (``days``), read from its source otherwise (``years``; ``icalendar``, the file's text)."""

    days = FlatListField(
        child=ExcludedDaySerializer(),
        required=False,
        max_length=MAX_DAYS,
        help_text="Read: every excluded day. Write (source manual): the days, replacing "
        "the ones it had.",
    )
    years = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=9,
        help_text="Source holidays or ical: the years to fill, such as 2026-2036 (default: "
        "last year to ten years ahead).",
    )
    icalendar = serializers.CharField(
        write_only=True,
        required=False,
        max_length=1_000_000,
        trim_whitespace=False,
        help_text="Source ical: the iCalendar file's text to read the days from.",
    )
    weekend = FlatListField(
        child=serializers.IntegerField(min_value=1, max_value=7),
        required=False,
        max_length=6,
        help_text="ISO weekdays (1 Monday ... 7 Sunday) no occurrence is moved onto; "
        "source holidays takes the country's.",
    )

    class Meta:
        model = Calendar
        fields = (
            "id", "name", "description", "timezone", "weekend", "source", "country",
            "subdivision", "days", "years", "icalendar", "updated_at",
        )  # fmt: skip
        read_only_fields = ("updated_at",)


class ErrorSerializer(serializers.Serializer[Any]):
    """A refusal of the request as a whole (401, 403, 404, 409, 412, 428, 503)."""

    detail = serializers.CharField(help_text="Why, in words.")


class ValidationErrorSerializer(serializers.Serializer[Any]):
    """Invalid input (400): each field's errors under its name, errors of the whole body
    under non_field_errors; a request that was refused as a whole (a body that does not
    parse, an action the schedule's state does not allow) has a detail instead."""

    detail = serializers.CharField(required=False, help_text="Why, when no field is to blame.")
    non_field_errors = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Errors of the whole body."
    )


class ValidationErrorSchema(OpenApiSerializerExtension):
    """Errors are keyed by field name, which a serializer cannot list: any other property
    is a field's list of errors."""

    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(
            self.target, direction, bypass_extensions=True
        )
        schema["additionalProperties"] = build_array_type({"type": "string"})
        return schema
