"""Schedules: the schedule itself (validated by ``services.validate``, one set of rules for
the admin, the API and code), the bodies of its actions (pause, resume, run now, backfill)
and its previews."""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.urls import reverse
from django.utils.functional import cached_property
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import build_array_type, build_object_type
from drf_spectacular.utils import Direction, extend_schema_field
from rest_framework import serializers

from django_schedulinator.api.serializers.errors import as_drf_errors
from django_schedulinator.api.serializers.fields import (
    DateTimeField,
    DurationField,
    FieldsBuiltOnce,
    FlatListField,
    JSONField,
    TaskField,
)
from django_schedulinator.conf import MAX_PREVIEW_COUNT, app_settings
from django_schedulinator.models import Schedule
from django_schedulinator.registry import registry
from django_schedulinator.services import validate


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
        errors = as_drf_errors(exc)
        if only is not None:
            errors = {name: messages for name, messages in errors.items() if name in only}
        if errors:
            raise serializers.ValidationError(errors) from None


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
        extra_kwargs = {
            "latitude": {"min_value": -90, "max_value": 90},
            "longitude": {"min_value": -180, "max_value": 180},
        }

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
        extra_kwargs = ScheduleSerializer.Meta.extra_kwargs

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        count = attrs.pop("count", app_settings.PREVIEW_COUNT)
        candidate = Schedule(**attrs)
        apply_model_validation(candidate, exclude_unique=True, only=Schedule.TIMING_FIELDS)
        return {"schedule": candidate, "count": count}


class TimingPreviewResultSerializer(serializers.Serializer[Any]):
    description = serializers.CharField(help_text="The timing in words.")
    occurrences = PreviewItemSerializer(many=True, help_text="The next occurrences.")
